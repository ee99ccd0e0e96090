//! libpmc: the user-level side of hwpmc(4), with FreeBSD's C API and
//! symbols.
//!
//! - [`pmc`]: pmc(3) as a Rust type, [`pmc::Pmc`], over a
//!   [`transport::Transport`];
//! - the C entry points below (`pmc_init`, `pmc_allocate`, ...), which keep
//!   one `Pmc` for the process and report failures through `errno`, as
//!   FreeBSD's library does; declared in `pmc.h`;
//! - [`pmclog`]: pmclog(3), the log reader, declared in `pmclog.h`;
//! - [`libpmc_sim`] (feature `sim`): the simulator transport.

use core::ffi::{c_char, c_int, c_uint};
use std::ffi::{CStr, CString};
use std::sync::{Mutex, OnceLock};

use uapi::pmc::*;

pub mod pmc;
pub mod pmclog;
pub mod transport;

#[cfg(feature = "sim")]
pub mod libpmc_sim;

use pmc::{Errno, Pmc};

/// The process's connection, made by the first successful `pmc_init`.
static LIBRARY: OnceLock<Pmc> = OnceLock::new();
/// Serialises `pmc_init` so that two threads make one connection.
static INIT: Mutex<()> = Mutex::new(());

fn set_errno(e: Errno) {
    // SAFETY: the C library's errno location is valid and owned by the
    // calling thread.
    unsafe {
        #[cfg(target_os = "freebsd")]
        {
            *libc::__error() = e;
        }
        #[cfg(not(target_os = "freebsd"))]
        {
            *libc::__errno_location() = e;
        }
    }
}

/// 0, or -1 with errno set: the C convention of every pmc(3) call.
fn c_result(r: Result<(), Errno>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// The connection, or ENXIO before a successful `pmc_init` (FreeBSD's
/// library fails the same way, through its unset system call number).
fn library() -> Result<&'static Pmc, Errno> {
    LIBRARY.get().ok_or(libc::ENXIO)
}

fn with_library(f: impl FnOnce(&Pmc) -> Result<(), Errno>) -> c_int {
    c_result(library().and_then(f))
}

/// EFAULT for a NULL result pointer, checked before the operation so that
/// nothing happens that the caller cannot learn about.
fn check_out<T>(ptr: *mut T) -> Result<(), Errno> {
    if ptr.is_null() {
        Err(libc::EFAULT)
    } else {
        Ok(())
    }
}

/// Writes through an out-pointer, or fails with EFAULT for NULL.
fn out<T>(ptr: *mut T, v: T) -> Result<(), Errno> {
    if ptr.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: non-NULL, and the caller passes a writable T (the function's
    // contract in pmc(3)).
    unsafe { ptr.write(v) };
    Ok(())
}

/// The process's connection to hwpmc (for the tools written in Rust).
pub fn library_handle() -> Result<&'static Pmc, Errno> {
    library()
}

/// `pmc_init`: connects to hwpmc through the transport the environment
/// selects (see [`transport::from_environment`]).
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_init() -> c_int {
    let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if LIBRARY.get().is_some() {
        return 0;
    }
    c_result(
        transport::from_environment()
            .and_then(Pmc::init)
            .map(|pmc| {
                let _ = LIBRARY.set(pmc);
            }),
    )
}

/// `pmc_allocate`.
///
/// # Safety
/// `ctrspec` is a NUL-terminated string; `pmcid` is writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_allocate(
    ctrspec: *const c_char,
    mode: c_uint,
    flags: u32,
    cpu: c_int,
    pmcid: *mut PmcId,
    count: u64,
) -> c_int {
    with_library(|l| {
        if ctrspec.is_null() {
            return Err(libc::EINVAL);
        }
        check_out(pmcid)?;
        // SAFETY: a NUL-terminated string (the function's contract).
        let spec = unsafe { CStr::from_ptr(ctrspec) }
            .to_str()
            .map_err(|_| libc::EINVAL)?;
        let id = l.allocate(spec, mode, flags, cpu, count)?;
        out(pmcid, id)
    })
}

macro_rules! id_op {
    ($(#[$m:meta])* $name:ident => $method:ident) => {
        $(#[$m])*
        // SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(pmc: PmcId) -> c_int {
            with_library(|l| l.$method(pmc))
        }
    };
}
id_op!(/// `pmc_start`.
    pmc_start => start);
id_op!(/// `pmc_stop`.
    pmc_stop => stop);
id_op!(/// `pmc_release`.
    pmc_release => release);

/// `pmc_attach`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_attach(pmc: PmcId, pid: libc::pid_t) -> c_int {
    with_library(|l| l.attach(pmc, pid))
}

/// `pmc_detach`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_detach(pmc: PmcId, pid: libc::pid_t) -> c_int {
    with_library(|l| l.detach(pmc, pid))
}

/// `pmc_read`.
///
/// # Safety
/// `value` is writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_read(pmc: PmcId, value: *mut PmcValue) -> c_int {
    with_library(|l| {
        check_out(value)?;
        out(value, l.read(pmc)?)
    })
}

/// `pmc_write`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_write(pmc: PmcId, value: PmcValue) -> c_int {
    with_library(|l| l.write(pmc, value))
}

/// `pmc_rw`: writes `newvalue`, returns the old value in `oldvalue`.
///
/// # Safety
/// `oldvalue` is writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_rw(pmc: PmcId, newvalue: PmcValue, oldvalue: *mut PmcValue) -> c_int {
    with_library(|l| {
        check_out(oldvalue)?;
        out(oldvalue, l.rw(pmc, newvalue)?)
    })
}

/// `pmc_set`: the initial (counting) or reload (sampling) count.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_set(pmc: PmcId, value: PmcValue) -> c_int {
    with_library(|l| l.set(pmc, value))
}

/// `pmc_capabilities`.
///
/// # Safety
/// `caps` is writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_capabilities(pmc: PmcId, caps: *mut u32) -> c_int {
    with_library(|l| {
        check_out(caps)?;
        out(caps, l.capabilities(pmc)?)
    })
}

/// `pmc_width`.
///
/// # Safety
/// `width` is writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_width(pmc: PmcId, width: *mut u32) -> c_int {
    with_library(|l| {
        check_out(width)?;
        out(width, l.width(pmc)?)
    })
}

/// `pmc_configure_logfile`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_configure_logfile(fd: c_int) -> c_int {
    with_library(|l| l.configure_logfile(fd))
}

/// `pmc_flush_logfile`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_flush_logfile() -> c_int {
    with_library(|l| l.flush_logfile())
}

/// `pmc_close_logfile`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_close_logfile() -> c_int {
    with_library(|l| l.close_logfile())
}

/// `pmc_writelog`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_writelog(userdata: u32) -> c_int {
    with_library(|l| l.writelog(userdata))
}

/// `pmc_get_driver_stats`.
///
/// # Safety
/// `stats` is writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_get_driver_stats(stats: *mut pmc::PmcDriverstats) -> c_int {
    with_library(|l| {
        check_out(stats)?;
        out(stats, l.driver_stats()?)
    })
}

/// `pmc_get_msr`.
///
/// # Safety
/// `msr` is writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_get_msr(pmc: PmcId, msr: *mut u32) -> c_int {
    with_library(|l| {
        check_out(msr)?;
        out(msr, l.get_msr(pmc)?)
    })
}

/// `pmc_enable`: makes a row available (PMCADMIN to FREE).
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_enable(cpu: c_int, pmc: c_int) -> c_int {
    with_library(|l| l.admin(cpu, pmc, PmcState::Free))
}

/// `pmc_disable`: withdraws a row (PMCADMIN to DISABLED).
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_disable(cpu: c_int, pmc: c_int) -> c_int {
    with_library(|l| l.admin(cpu, pmc, PmcState::Disabled))
}

/// `pmc_cpuinfo`: the library's copy of the CPU information.
///
/// # Safety
/// `cpuinfo` is writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_cpuinfo(cpuinfo: *mut *const PmcOpGetcpuinfo) -> c_int {
    with_library(|l| out(cpuinfo, l.cpuinfo() as *const _))
}

/// `pmc_ncpu`: CPUs the driver knows, or -1 with ENXIO before `pmc_init`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_ncpu() -> c_int {
    match library() {
        Ok(l) => l.cpuinfo().pm_ncpu as c_int,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// `pmc_npmc`: rows per CPU; EINVAL for a CPU out of range.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_npmc(cpu: c_int) -> c_int {
    match library() {
        Ok(l) if cpu >= 0 && (cpu as u32) < l.cpuinfo().pm_ncpu => l.cpuinfo().pm_npmc as c_int,
        Ok(_) => {
            set_errno(libc::EINVAL);
            -1
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// `pmc_pmcinfo`: a malloc(3)ed `struct pmc_pmcinfo` (CPU number then one
/// `struct pmc_info` per row) that the caller frees.
///
/// # Safety
/// `info` is writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_pmcinfo(cpu: c_int, info: *mut *mut PmcOpGetpmcinfo) -> c_int {
    with_library(|l| {
        if info.is_null() {
            return Err(libc::EFAULT);
        }
        let rows = l.pmcinfo(cpu)?;
        let head = core::mem::offset_of!(PmcOpGetpmcinfo, pm_pmcs);
        let size = head + rows.len() * core::mem::size_of::<PmcInfo>();
        // SAFETY: malloc returns NULL or `size` writable bytes, suitably
        // aligned for any type.
        let block = unsafe { libc::malloc(size.max(1)) }.cast::<u8>();
        if block.is_null() {
            return Err(libc::ENOMEM);
        }
        // SAFETY: `block` has `size` bytes: the CPU number at 0 and the rows
        // from `head`, whose bytes are copied from initialised values.
        unsafe {
            block.cast::<i32>().write(cpu);
            for (i, row) in rows.iter().enumerate() {
                let src = uapi::AsBytes::as_bytes(row);
                core::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    block.add(head + i * src.len()),
                    src.len(),
                );
            }
        }
        out(info, block.cast::<PmcOpGetpmcinfo>())
    })
}

/// `pmc_event_names_of_class`: a malloc(3)ed array of the class's event
/// names (the names themselves belong to the library).
///
/// # Safety
/// `names` and `nevents` are writable.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_event_names_of_class(
    class: c_uint,
    names: *mut *mut *const c_char,
    nevents: *mut c_int,
) -> c_int {
    with_library(|l| {
        let class = PmcClass::from_raw(class).ok_or(libc::EINVAL)?;
        let events = l.events_of_class(class)?;
        if names.is_null() || nevents.is_null() {
            return Err(libc::EFAULT);
        }
        let bytes = events.len().max(1) * core::mem::size_of::<*const c_char>();
        // SAFETY: malloc returns NULL or `bytes` bytes aligned for pointers.
        let array = unsafe { libc::malloc(bytes) }.cast::<*const c_char>();
        if array.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, e) in events.iter().enumerate() {
            // SAFETY: `array` has room for events.len() pointers.
            unsafe { array.add(i).write(e.name.as_ptr()) };
        }
        out(names, array)?;
        out(nevents, events.len() as c_int)
    })
}

/// Interned C strings for the name functions, which return pointers that
/// live as long as the program.
fn intern(s: &str) -> *const c_char {
    static NAMES: Mutex<Vec<CString>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = names.iter().find(|c| c.to_bytes() == s.as_bytes()) {
        return c.as_ptr();
    }
    let c = CString::new(s).unwrap_or_default();
    let p = c.as_ptr();
    names.push(c);
    p
}

fn name_or_einval(name: Option<&str>) -> *const c_char {
    match name {
        Some(n) => intern(n),
        None => {
            set_errno(libc::EINVAL);
            core::ptr::null()
        }
    }
}

/// `pmc_name_of_capability`: the name of one `PMC_CAP_*` bit.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_name_of_capability(cap: c_uint) -> *const c_char {
    let name = (cap.count_ones() == 1)
        .then(|| PmcCaps::from_bits(cap))
        .flatten()
        .and_then(|c| c.iter_names().next())
        .map(|(n, _)| n);
    name_or_einval(name)
}

/// `pmc_name_of_class`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_name_of_class(class: c_uint) -> *const c_char {
    name_or_einval(PmcClass::from_raw(class).map(PmcClass::name))
}

/// `pmc_name_of_cputype`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_name_of_cputype(cputype: c_uint) -> *const c_char {
    name_or_einval(PmcCputype::from_raw(cputype).map(PmcCputype::name))
}

/// `pmc_name_of_disposition`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_name_of_disposition(disp: c_uint) -> *const c_char {
    name_or_einval(PmcDisp::from_raw(disp).map(PmcDisp::name))
}

/// `pmc_name_of_mode`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_name_of_mode(mode: c_uint) -> *const c_char {
    name_or_einval(PmcMode::from_raw(mode).map(PmcMode::name))
}

/// `pmc_name_of_state`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_name_of_state(state: c_uint) -> *const c_char {
    name_or_einval(PmcState::from_raw(state).map(PmcState::name))
}

/// `pmc_name_of_event`: static events by their table name, soft events by
/// the name the kernel registered (after `pmc_init`).
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_name_of_event(event: c_uint) -> *const c_char {
    let name = match library() {
        Ok(l) => l.event_name(event),
        Err(_) => uapi::pmc_events::event_name(event).map(|(_, n)| n),
    };
    name_or_einval(name)
}

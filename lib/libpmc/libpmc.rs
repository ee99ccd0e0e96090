//! libpmc: the user-level side of hwpmc(4), with FreeBSD's C API and
//! symbols.
//!
//! - [`pmc`]: pmc(3) as a Rust type, [`pmc::Pmc`], over a
//!   [`transport::Transport`];
//! - the C entry points below (`pmc_init`, `pmc_allocate`, ...), which keep
//!   one `Pmc` for the process and report failures through `errno`, as
//!   FreeBSD's library does; declared in `pmc.h`;
//! - [`pmclog`]: pmclog(3), the log reader, declared in `pmclog.h`;
//! - [`libpmc_json`]: the JSON form of its events, for `event_to_json()`
//!   (`pmcformat.h`, C++, in `libpmc_json.cc`);
//! - [`uexterr`]: the extended error of a failed request, as libc's
//!   uexterr_gettext(3) gives it;
//! - [`libpmc_sim`] (feature `sim`): the simulator transport.

use core::ffi::{c_char, c_int, c_uint};
use std::ffi::{CStr, CString};
use std::sync::{Mutex, OnceLock};

use uapi::pmc::*;

pub mod libpmc_json;
pub mod libpmc_pmu_util;
pub mod pmc;
pub mod pmc_event_tables;
#[cfg(test)]
mod pmc_version;
pub mod pmclog;
pub mod regcomp;
pub mod transport;
pub mod uexterr;

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
/// library makes its system call with no number then: ENOSYS and SIGSYS;
/// pmc.3 lists the difference).
fn library() -> Result<&'static Pmc, Errno> {
    LIBRARY.get().ok_or(libc::ENXIO)
}

fn with_library(f: impl FnOnce(&Pmc) -> Result<(), Errno>) -> c_int {
    c_result(library().and_then(f))
}

/// [`with_library`] for the functions FreeBSD's library serves before
/// `pmc_init` too: `f` gets None then.
fn with_library_or(f: impl FnOnce(Option<&Pmc>) -> Result<(), Errno>) -> c_int {
    c_result(f(library().ok()))
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

/// `pmc_extcaps`: the driver's extensions (`PMC_EXTCAP_*`), EOPNOTSUPP
/// without any.
///
/// # Safety
/// `caps` is writable.
// SAFETY: the C name is this library's own (pmc_notify(3)); nothing else
// linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_extcaps(caps: *mut u32) -> c_int {
    with_library(|l| {
        check_out(caps)?;
        out(caps, l.ext_caps()?)
    })
}

/// `pmc_notify`: a notification descriptor for sampling PMC `pmc`
/// (pmc_notify(3)).
///
/// # Safety
/// `fdp` is writable.
// SAFETY: the C name is this library's own (pmc_notify(3)); nothing else
// linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_notify(
    pmc: PmcId,
    flags: u32,
    count: u32,
    refresh: u32,
    signo: c_int,
    fdp: *mut c_int,
) -> c_int {
    with_library(|l| {
        check_out(fdp)?;
        out(fdp, l.notify(pmc, flags, count, refresh, signo)?)
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
    // Before pmc_init, as FreeBSD's: the static tables for a CPU type of
    // 0 (no ARM core), and no software events.
    let before_init = |class: PmcClass| match class {
        PmcClass::Soft => Ok(&[][..]),
        _ => crate::pmc_event_tables::class_events(class, 0).ok_or(libc::EINVAL),
    };
    with_library_or(|l| {
        let class = PmcClass::from_raw(class).ok_or(libc::EINVAL)?;
        let events = match l {
            Some(l) => l.events_of_class(class)?,
            None => before_init(class)?,
        };
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
    // PMC_DISP_FIRST to PMC_DISP_LAST, as FreeBSD's: PMC_DISP_UNKNOWN,
    // past the last, has no name.
    let disp = PmcDisp::from_raw(disp).filter(|d| d.raw() <= uapi::pmc::PMC_DISP_LAST.raw());
    name_or_einval(disp.map(PmcDisp::name))
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
    // PMC_STATE_FIRST to PMC_STATE_LAST, as FreeBSD's: PMC_STATE_MAX has
    // no name.
    let state = PmcState::from_raw(state).filter(|s| s.raw() <= uapi::pmc::PMC_STATE_LAST.raw());
    name_or_einval(state.map(PmcState::name))
}

/// `pmc_name_of_event`: static events by the name libpmc's tables give
/// them on this machine's CPU type (none before `pmc_init`, as FreeBSD's
/// library knows no CPU type then), soft events by the name the kernel
/// registered (after `pmc_init`).
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_name_of_event(event: c_uint) -> *const c_char {
    let name = match library() {
        Ok(l) => l.event_name(event),
        Err(_) => {
            crate::pmc_event_tables::static_event_name(event, 0).and_then(|n| n.to_str().ok())
        }
    };
    name_or_einval(name)
}

/// The PMU table of a CPU key given by the caller, or of this machine
/// (through the connection, or the transport the environment selects when
/// `pmc_init` has not run: FreeBSD's functions need no `pmc_init`).
///
/// # Safety
/// `cpuid` is NULL or a NUL-terminated string.
unsafe fn pmu_table(cpuid: *const c_char) -> Option<libpmc_pmu_util::PmuTable> {
    if !cpuid.is_null() {
        // SAFETY: the caller passes a C string.
        let key = unsafe { CStr::from_ptr(cpuid) }.to_str().ok()?;
        return libpmc_pmu_util::PmuTable::for_cpuid(key);
    }
    if let Ok(l) = library() {
        return l.pmu().copied();
    }
    static MACHINE: OnceLock<Option<libpmc_pmu_util::PmuTable>> = OnceLock::new();
    *MACHINE.get_or_init(|| {
        let t = transport::from_environment().ok()?;
        let key = t.sysctl_string("kern.hwpmc.cpuid").ok()?;
        libpmc_pmu_util::PmuTable::for_cpuid(&key)
    })
}

/// A C string argument as text; NULL or non-UTF-8 is `None`.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn c_text<'a>(s: *const c_char) -> Option<&'a str> {
    if s.is_null() {
        return None;
    }
    // SAFETY: the caller passes a C string that outlives the call.
    unsafe { CStr::from_ptr(s) }.to_str().ok()
}

/// Writes text through C's stdio, so that it interleaves with the
/// program's own printf(3) output as FreeBSD's library output does.
fn c_print(text: &[u8]) {
    if text.is_empty() {
        return;
    }
    let Ok(c) = CString::new(text) else { return };
    // SAFETY: a constant format and a NUL-terminated argument.
    unsafe { libc::printf(c"%s".as_ptr(), c.as_ptr()) };
}

/// `pmc_pmu_enabled`: 1 when libpmc has event tables for this CPU.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub extern "C" fn pmc_pmu_enabled() -> c_int {
    // SAFETY: NULL asks for this machine's table.
    c_int::from(unsafe { pmu_table(core::ptr::null()) }.is_some())
}

macro_rules! pmu_printer {
    ($(#[$doc:meta])* $name:ident, $print:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `event_name` is NULL or a NUL-terminated string.
        // SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(event_name: *const c_char) {
            // SAFETY: NULL asks for this machine's table.
            let Some(table) = (unsafe { pmu_table(core::ptr::null()) }) else {
                return;
            };
            // SAFETY: the caller passes NULL or a C string.
            let filter = unsafe { c_text(event_name) };
            let mut text = Vec::new();
            let _ = $print(&table, filter, &mut text);
            c_print(&text);
        }
    };
}

pmu_printer!(
    /// `pmc_pmu_print_counters`: every event name (containing the filter).
    pmc_pmu_print_counters,
    |t: &libpmc_pmu_util::PmuTable, f, o: &mut Vec<u8>| t.print_counters(f, o)
);
pmu_printer!(
    /// `pmc_pmu_print_counter_desc`: names and short descriptions.
    pmc_pmu_print_counter_desc,
    |t: &libpmc_pmu_util::PmuTable, f: Option<&str>, o: &mut Vec<u8>| t
        .print_counter_desc(f.unwrap_or(""), o)
);
pmu_printer!(
    /// `pmc_pmu_print_counter_desc_long`: names and long descriptions.
    pmc_pmu_print_counter_desc_long,
    |t: &libpmc_pmu_util::PmuTable, f: Option<&str>, o: &mut Vec<u8>| t
        .print_counter_desc_long(f.unwrap_or(""), o)
);
pmu_printer!(
    /// `pmc_pmu_print_counter_full`: every field of the matching events.
    pmc_pmu_print_counter_full,
    |t: &libpmc_pmu_util::PmuTable, f: Option<&str>, o: &mut Vec<u8>| t
        .print_counter_full(f.unwrap_or(""), o)
);

/// `pmc_pmu_sample_rate_get`: the event's sampling period, else 65536.
///
/// # Safety
/// `event_name` is NULL or a NUL-terminated string.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_pmu_sample_rate_get(event_name: *const c_char) -> u64 {
    // SAFETY: the caller passes NULL or a C string.
    let (table, name) = unsafe { (pmu_table(core::ptr::null()), c_text(event_name)) };
    match (table, name) {
        (Some(t), Some(n)) => t.sample_rate(n),
        _ => libpmc_pmu_util::DEFAULT_SAMPLE_COUNT,
    }
}

/// `pmc_pmu_pmcallocate`: fills an allocation request for a PMU event;
/// returns 0 or an errno value (ENOENT: no such event or no table;
/// EINVAL: a bad qualifier; EFAULT: NULL arguments).
///
/// # Safety
/// `event_name` is a NUL-terminated string; `pm` points to a writable
/// `struct pmc_op_pmcallocate`.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_pmu_pmcallocate(
    event_name: *const c_char,
    pm: *mut PmcOpPmcallocate,
) -> c_int {
    if event_name.is_null() || pm.is_null() {
        return libc::EFAULT;
    }
    // SAFETY: `pm` is a valid, writable request (the function's contract).
    let mut request = unsafe { pm.read() };
    // A failure leaves the event, the capabilities and the class 0, as
    // FreeBSD's resets them, and, once there is a table, the
    // machine-dependent part zeroed (FreeBSD zeroes it before the
    // look-up).
    let failed = |mut request: PmcOpPmcallocate, table: bool, e: c_int| {
        request.pm_ev = 0;
        request.pm_caps = 0;
        request.pm_class = 0;
        if table {
            request.pm_md = <uapi::pmc::PmcMdOpPmcallocate as uapi::Plain>::zeroed();
        }
        // SAFETY: as above.
        unsafe { pm.write(request) };
        e
    };
    // SAFETY: NULL asks for this machine's table.
    let Some(table) = (unsafe { pmu_table(core::ptr::null()) }) else {
        return failed(request, false, libc::ENOENT);
    };
    // SAFETY: the caller passes a C string.
    let Some(name) = (unsafe { c_text(event_name) }) else {
        return failed(request, true, libc::ENOENT);
    };
    match table.allocate(name, &mut request) {
        Ok(()) => {
            // SAFETY: as above.
            unsafe { pm.write(request) };
            0
        }
        Err(e) => failed(request, true, e),
    }
}

/// `pmc_pmu_event_get_by_idx`: the name at a table index, NULL when there
/// is no table or no such index.
///
/// # Safety
/// `cpuid` is NULL (this machine) or a NUL-terminated CPU key.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_pmu_event_get_by_idx(
    cpuid: *const c_char,
    idx: c_int,
) -> *const c_char {
    // SAFETY: the caller passes NULL or a C string.
    let table = unsafe { pmu_table(cpuid) };
    usize::try_from(idx)
        .ok()
        .and_then(|i| table?.event(i))
        .map_or(core::ptr::null(), |e| e.name.as_ptr())
}

/// `pmc_pmu_idx_get_by_event`: the table index of an event or alias, -1
/// when there is none.
///
/// # Safety
/// `cpuid` is NULL or a NUL-terminated CPU key; `event` is a
/// NUL-terminated string.
// SAFETY: the C name is pmc(3)'s own; nothing else linked with libpmc defines it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pmc_pmu_idx_get_by_event(
    cpuid: *const c_char,
    event: *const c_char,
) -> c_int {
    // SAFETY: the caller passes C strings (or NULL).
    let (table, name) = unsafe { (pmu_table(cpuid), c_text(event)) };
    match (table, name) {
        (Some(t), Some(n)) => t.find(n).map_or(-1, |(i, _)| i as c_int),
        _ => -1,
    }
}

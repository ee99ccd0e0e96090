//! hwpmc.ko's Rust archive: the driver (crate `hwpmc`) on kpi's FreeBSD
//! backend, the module event handler the C glue
//! (`sys/dev/hwpmc/hwpmc_glue.c`) chains to, and the panic handler.
//!
//! The system call needs no entry here: the driver registers its handler
//! with kpi when it loads, and the glue's sysent calls kpi's dispatcher.

#![no_std]

use core::ffi::{c_int, c_void};
use core::fmt::Write;
use core::panic::PanicInfo;
use core::sync::atomic::{AtomicPtr, Ordering};

use kpi::malloc::{KBox, Wait};

// `modeventtype_t` of sys/module.h.
const MOD_LOAD: c_int = 0;
const MOD_UNLOAD: c_int = 1;
const MOD_SHUTDOWN: c_int = 2;
const MOD_QUIESCE: c_int = 3;
/// `EOPNOTSUPP` of sys/errno.h: the answer to events a module ignores.
const EOPNOTSUPP: c_int = 45;

/// The loaded driver, between MOD_LOAD and MOD_UNLOAD. The kernel sends
/// module events one at a time, so a swap is enough.
static DRIVER: AtomicPtr<Option<hwpmc::Module>> = AtomicPtr::new(core::ptr::null_mut());

/// The module event handler (`modeventhand_t`), chained behind
/// `syscall_module_handler`, which has registered the system call on
/// MOD_LOAD and unregisters it after MOD_UNLOAD.
#[unsafe(no_mangle)]
pub extern "C" fn hwpmc_rs_modevent(
    _module: *mut c_void,
    event: c_int,
    _arg: *mut c_void,
) -> c_int {
    match event {
        MOD_LOAD => {
            // The slot first, so that a loaded driver always has a home.
            // Module events may sleep: M_WAITOK.
            let mut slot = match KBox::try_new(None, Wait::WaitOk) {
                Ok(slot) => slot,
                Err(e) => return e.get(),
            };
            match hwpmc::Module::load() {
                Ok(module) => {
                    *slot = Some(module);
                    DRIVER.store(KBox::into_raw(slot), Ordering::Release);
                    0
                }
                Err(e) => e.get(),
            }
        }
        MOD_UNLOAD | MOD_SHUTDOWN => {
            let raw = DRIVER.swap(core::ptr::null_mut(), Ordering::AcqRel);
            if !raw.is_null() {
                // SAFETY: made by KBox::into_raw at MOD_LOAD and taken once.
                let slot = unsafe { KBox::from_raw(raw) };
                if let Some(module) = slot.into_inner() {
                    module.unload();
                }
            }
            0
        }
        MOD_QUIESCE => 0,
        _ => EOPNOTSUPP,
    }
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    // A fixed buffer: panicking must not allocate.
    let mut out = kpi::LineBuf::<192>::new();
    // Truncation is the only failure and is wanted.
    let _ = match info.location() {
        Some(loc) => write!(
            out,
            "hwpmc: {} at {}:{}",
            info.message(),
            loc.file(),
            loc.line()
        ),
        None => write!(out, "hwpmc: {}", info.message()),
    };
    kpi::kernel_panic(out.as_str())
}

//! hwpmc.ko's Rust archive: the driver (crate `hwpmc`) on kpi's FreeBSD
//! backend, the module event handler the C glue
//! (`sys/dev/hwpmc/hwpmc_glue.c`) chains to, and the panic handler.
//!
//! The system call needs no entry here: the driver registers its handler
//! with kpi when it loads, and the glue's sysent calls kpi's dispatcher.

#![no_std]

use core::ffi::{c_int, c_void};
use core::panic::PanicInfo;

use kpi::kmod::{EOPNOTSUPP, Loaded, MOD_LOAD, MOD_QUIESCE, MOD_SHUTDOWN, MOD_UNLOAD};

/// The loaded driver, between MOD_LOAD and MOD_UNLOAD.
static DRIVER: Loaded<hwpmc::Module> = Loaded::new();

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
        MOD_LOAD => DRIVER.load(hwpmc::Module::load),
        MOD_UNLOAD | MOD_SHUTDOWN => {
            if let Some(module) = DRIVER.take() {
                module.unload();
            }
            0
        }
        MOD_QUIESCE => 0,
        _ => EOPNOTSUPP,
    }
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    kpi::kmod::panic("hwpmc", info)
}

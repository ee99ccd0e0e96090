//! pt.ko's Rust archive: the Intel PT backend (crate `intel_pt`) on kpi's
//! FreeBSD backend, the module event handler the C glue
//! (`sys/amd64/pt/pt_glue.c`) chains to, and the panic handler.
//!
//! The backend registers with hwt.ko through the two entry points hwt.ko
//! exports (sys/modules/hwt/NOTES.md): the glue declares
//! `MODULE_DEPEND(intel_pt, hwt, 1, 1, 1)`, so hwt.ko is loaded first and
//! stays while pt.ko is. The backend object crosses the module boundary
//! as a Rust trait object: both modules come from the same compiler and
//! tree, as buildkernel builds them.

#![no_std]

use core::ffi::{c_int, c_void};
use core::panic::PanicInfo;

use hwt::{BackendTag, HwtBackend};
use kpi::errno::{EDOOFUS, Errno};
use kpi::kmod::{EOPNOTSUPP, Loaded, MOD_LOAD, MOD_QUIESCE, MOD_SHUTDOWN, MOD_UNLOAD};
use kpi::malloc::{KBox, Wait};

// hwt.ko's exports (sys/modules/hwt/hwt_kmod.rs), with their signatures.
// The pointers are thin (to sized Rust types) and the pointees are only
// used by Rust code of the same compiler on both sides, hence the allow.
#[allow(improper_ctypes)]
unsafe extern "C" {
    fn hwt_rs_backend_register(
        name: *const u8,
        name_len: usize,
        kva_req: bool,
        ops: *mut KBox<dyn HwtBackend>,
        tag: *mut *mut BackendTag,
    ) -> c_int;
    fn hwt_rs_backend_unregister(tag: *mut BackendTag);
}

/// A registration with hwt.ko, ended when dropped.
#[derive(Debug)]
struct Registration(*mut BackendTag);

// SAFETY: the tag is hwt.ko's and only handed back to it, from whichever
// thread unloads the module.
unsafe impl Send for Registration {}
// SAFETY: nothing is reached through a shared reference.
unsafe impl Sync for Registration {}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: the tag hwt_rs_backend_register gave, handed back once.
        unsafe { hwt_rs_backend_unregister(self.0) }
    }
}

/// Registers `ops` with hwt.ko under `name`.
fn register(
    name: &'static str,
    kva_req: bool,
    ops: KBox<dyn HwtBackend>,
) -> kpi::KResult<Registration> {
    let ops = KBox::into_raw(KBox::try_new(ops, Wait::WaitOk)?);
    let mut tag = core::ptr::null_mut();
    // SAFETY: a static name; `ops` given up (hwt.ko frees it on failure);
    // a writable tag.
    let e = unsafe { hwt_rs_backend_register(name.as_ptr(), name.len(), kva_req, ops, &mut tag) };
    match Errno::new(e) {
        None if !tag.is_null() => Ok(Registration(tag)),
        None => Err(EDOOFUS),
        Some(e) => Err(e),
    }
}

/// The loaded backend between MOD_LOAD and MOD_UNLOAD (events come one
/// at a time).
static BACKEND: Loaded<intel_pt::Module<Registration>> = Loaded::new();

/// The module event handler (`modeventhand_t`).
#[unsafe(no_mangle)]
pub extern "C" fn pt_rs_modevent(_module: *mut c_void, event: c_int, _arg: *mut c_void) -> c_int {
    match event {
        MOD_LOAD => BACKEND.load(|| intel_pt::Module::load_with(register)),
        MOD_UNLOAD => {
            // Dropping the module unregisters it.
            drop(BACKEND.take());
            0
        }
        // FreeBSD's pt does nothing at shutdown or quiesce either.
        MOD_SHUTDOWN | MOD_QUIESCE => 0,
        _ => EOPNOTSUPP,
    }
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    kpi::kmod::panic("pt", info)
}

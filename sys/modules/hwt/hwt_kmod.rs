//! hwt.ko's Rust archive: the framework (crate `hwt`) on kpi's FreeBSD
//! backend, the module event handler the C glue (`sys/dev/hwt/hwt_glue.c`)
//! chains to, the entry points of trace backends, and the panic handler.
//!
//! # Backends
//!
//! A backend module (pt.ko: crate `intel_pt`, sys/amd64/pt) declares
//! `MODULE_DEPEND(<name>, hwt, 1, 1, 1)`, so hwt.ko is loaded first and
//! stays loaded while the backend is, and registers through
//! [`hwt_rs_backend_register`], which hwt.ko exports (`EXPORT_SYMS` in
//! its Makefile; in a static kernel `hwt_rs.o` keeps it global). The
//! backend's `HwtBackend` object crosses the module boundary as a Rust
//! trait object, so both sides must be built by the same compiler from
//! the same tree, as buildkernel builds them; the backend crate declares
//! the two functions in an `unsafe extern "C"` block with these exact
//! signatures.

#![no_std]

use core::ffi::{c_int, c_void};
use core::panic::PanicInfo;

use hwt::{BackendTag, HwtBackend};
use kpi::kmod::{EOPNOTSUPP, Loaded, MOD_LOAD, MOD_QUIESCE, MOD_SHUTDOWN, MOD_UNLOAD};
use kpi::malloc::{KBox, Wait};
/// `ENXIO`: no framework loaded.
const ENXIO: c_int = 6;
/// `EINVAL`.
const EINVAL: c_int = 22;

/// The loaded framework between MOD_LOAD and MOD_UNLOAD (events come one
/// at a time; backends cannot outlive it, by their MODULE_DEPEND).
static FRAMEWORK: Loaded<hwt::Module> = Loaded::new();

/// The module event handler (`modeventhand_t`).
#[unsafe(no_mangle)]
pub extern "C" fn hwt_rs_modevent(_module: *mut c_void, event: c_int, _arg: *mut c_void) -> c_int {
    match event {
        MOD_LOAD => FRAMEWORK.load(hwt::Module::load),
        // A static kernel sends MOD_SHUTDOWN only; tearing down at
        // shutdown is what FreeBSD's hwt does not do, so it is ignored.
        MOD_UNLOAD => {
            // Dropping the module unloads it.
            drop(FRAMEWORK.take());
            0
        }
        MOD_SHUTDOWN | MOD_QUIESCE => 0,
        _ => EOPNOTSUPP,
    }
}

/// `hwt_backend_register` for backend modules: registers `*ops` (a
/// `KBox<dyn HwtBackend>` the caller boxed once more and gives up) under
/// the name of `name_len` bytes at `name`, which must stay valid while
/// the backend is registered (a static of the backend module). On
/// success `*tag` is the registration, for
/// [`hwt_rs_backend_unregister`]; else an errno (EEXIST: the name is
/// taken; ENXIO: hwt is not loaded) and `ops` is freed.
///
/// # Safety
/// `name` has `name_len` bytes of UTF-8 that outlive the registration;
/// `ops` came from `KBox::into_raw` of a `KBox<KBox<dyn HwtBackend>>`
/// built by the same compiler from the same tree; `tag` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hwt_rs_backend_register(
    name: *const u8,
    name_len: usize,
    kva_req: bool,
    ops: *mut KBox<dyn HwtBackend>,
    tag: *mut *mut BackendTag,
) -> c_int {
    if ops.is_null() || tag.is_null() || name.is_null() {
        return EINVAL;
    }
    // SAFETY: the caller gives up the box.
    let ops = unsafe { KBox::from_raw(ops) }.into_inner();
    // SAFETY: the caller's name outlives the registration, which the
    // backend ends before it unloads.
    let bytes: &'static [u8] = unsafe { core::slice::from_raw_parts(name, name_len) };
    let Ok(name) = core::str::from_utf8(bytes) else {
        return EINVAL;
    };
    // SAFETY: the framework lives until MOD_UNLOAD, which the backend's
    // dependency on hwt holds off while the backend is loaded.
    let Some(module) = (unsafe { FRAMEWORK.get() }) else {
        return ENXIO;
    };
    let registered = module
        .register_backend(name, kva_req, ops)
        .and_then(|t| KBox::try_new(t, Wait::WaitOk));
    match registered {
        Ok(t) => {
            // SAFETY: writable, as the caller promised.
            unsafe { *tag = KBox::into_raw(t) };
            0
        }
        Err(e) => e.get(),
    }
}

/// `hwt_backend_unregister`: ends a registration of
/// [`hwt_rs_backend_register`].
///
/// # Safety
/// `tag` came from [`hwt_rs_backend_register`] and is used once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hwt_rs_backend_unregister(tag: *mut BackendTag) {
    if !tag.is_null() {
        // SAFETY: the caller's tag, given back once.
        drop(unsafe { KBox::from_raw(tag) });
    }
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    kpi::kmod::panic("hwt", info)
}

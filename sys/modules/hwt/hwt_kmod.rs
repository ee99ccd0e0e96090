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
use core::fmt::Write;
use core::panic::PanicInfo;
use core::sync::atomic::{AtomicPtr, Ordering};

use hwt::{BackendTag, HwtBackend};
use kpi::malloc::{KBox, Wait};

// `modeventtype_t` of sys/module.h.
const MOD_LOAD: c_int = 0;
const MOD_UNLOAD: c_int = 1;
const MOD_SHUTDOWN: c_int = 2;
const MOD_QUIESCE: c_int = 3;
/// `EOPNOTSUPP` of sys/errno.h.
const EOPNOTSUPP: c_int = 45;
/// `ENXIO`: no framework loaded.
const ENXIO: c_int = 6;
/// `EINVAL`.
const EINVAL: c_int = 22;

/// The loaded framework between MOD_LOAD and MOD_UNLOAD (events come one
/// at a time; backends cannot outlive it, by their MODULE_DEPEND).
static FRAMEWORK: AtomicPtr<hwt::Module> = AtomicPtr::new(core::ptr::null_mut());

/// The module event handler (`modeventhand_t`).
#[unsafe(no_mangle)]
pub extern "C" fn hwt_rs_modevent(_module: *mut c_void, event: c_int, _arg: *mut c_void) -> c_int {
    match event {
        MOD_LOAD => {
            let module = match hwt::Module::load() {
                Ok(m) => m,
                Err(e) => return e.get(),
            };
            match KBox::try_new(module, Wait::WaitOk) {
                Ok(b) => {
                    FRAMEWORK.store(KBox::into_raw(b), Ordering::Release);
                    0
                }
                // Dropping the module unloads it again.
                Err(e) => e.get(),
            }
        }
        // A static kernel sends MOD_SHUTDOWN only; tearing down at
        // shutdown is what FreeBSD's hwt does not do, so it is ignored.
        MOD_UNLOAD => {
            let raw = FRAMEWORK.swap(core::ptr::null_mut(), Ordering::AcqRel);
            if !raw.is_null() {
                // SAFETY: made by KBox::into_raw at MOD_LOAD, taken once.
                drop(unsafe { KBox::from_raw(raw) });
            }
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
    let raw = FRAMEWORK.load(Ordering::Acquire);
    // SAFETY: the framework lives until MOD_UNLOAD, which the backend's
    // dependency on hwt holds off while the backend is loaded.
    let Some(module) = (unsafe { raw.as_ref() }) else {
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
    // A fixed buffer: panicking must not allocate.
    let mut out = kpi::LineBuf::<192>::new();
    // Truncation is the only failure and is wanted.
    let _ = match info.location() {
        Some(loc) => write!(
            out,
            "hwt: {} at {}:{}",
            info.message(),
            loc.file(),
            loc.line()
        ),
        None => write!(out, "hwt: {}", info.message()),
    };
    kpi::kernel_panic(out.as_str())
}

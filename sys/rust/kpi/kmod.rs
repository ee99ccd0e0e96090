//! What each kernel module's Rust archive does around its crate: answer
//! the module events of sys/module.h, keep the loaded module between
//! MOD_LOAD and MOD_UNLOAD, and say where a panic came from.

use core::ffi::c_int;
use core::sync::atomic::{AtomicPtr, Ordering};

use crate::KResult;
use crate::malloc::{KBox, Wait};

/// `MOD_LOAD` of `modeventtype_t`.
pub const MOD_LOAD: c_int = 0;
/// `MOD_UNLOAD`.
pub const MOD_UNLOAD: c_int = 1;
/// `MOD_SHUTDOWN`.
pub const MOD_SHUTDOWN: c_int = 2;
/// `MOD_QUIESCE`.
pub const MOD_QUIESCE: c_int = 3;
/// `EOPNOTSUPP`: the answer to an event a module does not handle.
pub const EOPNOTSUPP: c_int = 45;

/// The loaded module, between MOD_LOAD and MOD_UNLOAD. The kernel sends
/// a module's events one at a time, so a swap is enough.
#[derive(Debug)]
pub struct Loaded<T>(AtomicPtr<Option<T>>);

// SAFETY: the module is handed from the loading thread to the unloading
// one, and shared references reach it only through `get`'s contract.
unsafe impl<T: Send + Sync> Sync for Loaded<T> {}

impl<T> Loaded<T> {
    /// Nothing loaded.
    pub const fn new() -> Loaded<T> {
        Loaded(AtomicPtr::new(core::ptr::null_mut()))
    }

    /// MOD_LOAD: `load`s the module into a slot allocated first (module
    /// events may sleep: M_WAITOK), so that a loaded module always has
    /// its home; 0 or the errno.
    pub fn load(&self, load: impl FnOnce() -> KResult<T>) -> c_int {
        let mut slot = match KBox::try_new(None, Wait::WaitOk) {
            Ok(slot) => slot,
            Err(e) => return e.get(),
        };
        match load() {
            Ok(module) => {
                *slot = Some(module);
                let old = self.0.swap(KBox::into_raw(slot), Ordering::AcqRel);
                crate::kassert!(old.is_null(), "a module loaded twice");
                0
            }
            Err(e) => e.get(),
        }
    }

    /// MOD_UNLOAD: the loaded module, for the caller to unload; None when
    /// none is.
    pub fn take(&self) -> Option<T> {
        let raw = self.0.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if raw.is_null() {
            return None;
        }
        // SAFETY: made by KBox::into_raw in `load`, and swapped out once.
        unsafe { KBox::from_raw(raw) }.into_inner()
    }

    /// The loaded module, if any.
    ///
    /// # Safety
    /// No [`Loaded::take`] may run while the reference lives (a module
    /// that depends on this one holds its unload off, for instance).
    pub unsafe fn get(&self) -> Option<&T> {
        let raw = self.0.load(Ordering::Acquire);
        // SAFETY: a slot `load` made lives until `take`, which the caller
        // promises does not run meanwhile.
        unsafe { raw.as_ref() }.and_then(Option::as_ref)
    }
}

impl<T> Default for Loaded<T> {
    fn default() -> Loaded<T> {
        Loaded::new()
    }
}

/// The panic handler's work: `module: message at file:line` to panic(9),
/// from a fixed buffer (panicking must not allocate; a longer message is
/// cut).
#[cfg(all(feature = "freebsd", not(feature = "sim")))]
pub fn panic(module: &str, info: &core::panic::PanicInfo<'_>) -> ! {
    use core::fmt::Write;
    let mut out = crate::LineBuf::<192>::new();
    let _ = match info.location() {
        Some(loc) => write!(
            out,
            "{module}: {} at {}:{}",
            info.message(),
            loc.file(),
            loc.line()
        ),
        None => write!(out, "{module}: {}", info.message()),
    };
    crate::kernel_panic(out.as_str())
}

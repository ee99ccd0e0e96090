//! The emulator under [`crate::cpu`]: Unicorn 2 (Debian's `libunicorn2`),
//! loaded dynamically, through the few of its C functions ksim needs.
//!
//! The declarations are written here rather than taken from a crate: the
//! interface used is a dozen functions and constants, and the
//! `unicorn-engine` crate would build its own copy of QEMU instead of
//! using the system's library. The constants are those of Unicorn 2.0's
//! `unicorn/unicorn.h`, `x86.h` and `arm64.h`; the build script checks them
//! against the installed headers (`cpu/unicorn_check.c`).
//!
//! Nothing outside `cpu` sees this module.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

/// `uc_engine *`.
pub type UcEngine = *mut c_void;
/// `uc_hook`.
pub type UcHook = usize;
/// `uc_err`.
pub type UcErr = c_int;

pub const UC_ERR_OK: UcErr = 0;
pub const UC_ERR_READ_UNMAPPED: UcErr = 6;
pub const UC_ERR_WRITE_UNMAPPED: UcErr = 7;
pub const UC_ERR_FETCH_UNMAPPED: UcErr = 8;
pub const UC_ERR_INSN_INVALID: UcErr = 10;
pub const UC_ERR_WRITE_PROT: UcErr = 12;
pub const UC_ERR_READ_PROT: UcErr = 13;
pub const UC_ERR_FETCH_PROT: UcErr = 14;
pub const UC_ERR_EXCEPTION: UcErr = 21;

pub const UC_ARCH_ARM64: c_int = 2;
pub const UC_ARCH_X86: c_int = 4;
pub const UC_MODE_ARM: c_int = 0;
pub const UC_MODE_64: c_int = 1 << 3;

pub const UC_HOOK_INTR: c_int = 1 << 0;
pub const UC_HOOK_INSN: c_int = 1 << 1;
pub const UC_HOOK_CODE: c_int = 1 << 2;
pub const UC_HOOK_MEM_READ: c_int = 1 << 10;
pub const UC_HOOK_MEM_WRITE: c_int = 1 << 11;
/// `UC_HOOK_MEM_UNMAPPED | UC_HOOK_MEM_PROT`.
pub const UC_HOOK_MEM_INVALID: c_int = 0x3f0;

/// `uc_mem_type` values.
pub const UC_MEM_WRITE: c_int = 17;
pub const UC_MEM_READ_UNMAPPED: c_int = 19;
pub const UC_MEM_WRITE_UNMAPPED: c_int = 20;
pub const UC_MEM_FETCH_UNMAPPED: c_int = 21;
pub const UC_MEM_WRITE_PROT: c_int = 22;
pub const UC_MEM_READ_PROT: c_int = 23;

pub const UC_PROT_READ: u32 = 1;
pub const UC_PROT_WRITE: u32 = 2;
pub const UC_PROT_EXEC: u32 = 4;

pub const UC_X86_REG_EFLAGS: c_int = 25;
pub const UC_X86_REG_RAX: c_int = 35;
pub const UC_X86_REG_RBP: c_int = 36;
pub const UC_X86_REG_RDI: c_int = 39;
pub const UC_X86_REG_RDX: c_int = 40;
pub const UC_X86_REG_RIP: c_int = 41;
pub const UC_X86_REG_RSI: c_int = 43;
pub const UC_X86_REG_RSP: c_int = 44;
pub const UC_X86_REG_R8: c_int = 106;
pub const UC_X86_REG_R9: c_int = 107;
pub const UC_X86_REG_R10: c_int = 108;
pub const UC_X86_REG_R11: c_int = 109;
pub const UC_X86_REG_RCX: c_int = 38;
pub const UC_X86_INS_SYSCALL: c_int = 699;

pub const UC_ARM64_REG_X29: c_int = 1;
pub const UC_ARM64_REG_NZCV: c_int = 3;
pub const UC_ARM64_REG_SP: c_int = 4;
pub const UC_ARM64_REG_X0: c_int = 199;
pub const UC_ARM64_REG_X8: c_int = 207;
pub const UC_ARM64_REG_X30: c_int = 2;
pub const UC_ARM64_REG_PC: c_int = 260;

/// `uc_cb_hookcode_t`.
pub type HookCode = extern "C" fn(UcEngine, u64, u32, *mut c_void);
/// `uc_cb_hookmem_t`.
pub type HookMem = extern "C" fn(UcEngine, c_int, u64, c_int, i64, *mut c_void);
/// `uc_cb_eventmem_t`.
pub type HookMemInvalid = extern "C" fn(UcEngine, c_int, u64, c_int, i64, *mut c_void) -> bool;
/// `uc_cb_hookintr_t`.
pub type HookIntr = extern "C" fn(UcEngine, u32, *mut c_void);
/// `uc_cb_insn_syscall_t`.
pub type HookSyscall = extern "C" fn(UcEngine, *mut c_void);

/// The library's file name (Debian's libunicorn2, and Unicorn 2's soname
/// everywhere).
pub const LIBRARY: &str = "libunicorn.so.2";

type UcOpenFn = unsafe extern "C" fn(c_int, c_int, *mut UcEngine) -> UcErr;
type UcCloseFn = unsafe extern "C" fn(UcEngine) -> UcErr;
type UcStrerrorFn = unsafe extern "C" fn(UcErr) -> *const c_char;
type UcMemMapPtrFn = unsafe extern "C" fn(UcEngine, u64, usize, u32, *mut c_void) -> UcErr;
type UcMemUnmapFn = unsafe extern "C" fn(UcEngine, u64, usize) -> UcErr;
type UcMemWriteFn = unsafe extern "C" fn(UcEngine, u64, *const c_void, usize) -> UcErr;
type UcMemReadFn = unsafe extern "C" fn(UcEngine, u64, *mut c_void, usize) -> UcErr;
type UcRegWriteFn = unsafe extern "C" fn(UcEngine, c_int, *const c_void) -> UcErr;
type UcRegReadFn = unsafe extern "C" fn(UcEngine, c_int, *mut c_void) -> UcErr;
/// (uc, ids, values, count).
type UcRegWriteBatchFn =
    unsafe extern "C" fn(UcEngine, *mut c_int, *const *const c_void, c_int) -> UcErr;
/// (uc, ids, values, count).
type UcRegReadBatchFn =
    unsafe extern "C" fn(UcEngine, *mut c_int, *mut *mut c_void, c_int) -> UcErr;
/// (uc, begin, until, timeout, count).
type UcEmuStartFn = unsafe extern "C" fn(UcEngine, u64, u64, u64, usize) -> UcErr;
type UcEmuStopFn = unsafe extern "C" fn(UcEngine) -> UcErr;
/// (uc, handle, type, callback, user data, begin, end, ...): variadic,
/// `UC_HOOK_INSN` takes the instruction id after `end`.
type UcHookAddFn = unsafe extern "C" fn(
    UcEngine,
    *mut UcHook,
    c_int,
    *mut c_void,
    *mut c_void,
    u64,
    u64,
    ...
) -> UcErr;
type UcHookDelFn = unsafe extern "C" fn(UcEngine, UcHook) -> UcErr;

/// Unicorn's functions, looked up in the library once it is loaded.
///
/// The library is opened at run time (dlopen) rather than named at link
/// time: ksim is linked into libpmc's archive and shared object when they
/// carry the simulator, and the C programs that link those must not need
/// Unicorn unless a CPU is made.
pub struct Api {
    pub uc_open: UcOpenFn,
    pub uc_close: UcCloseFn,
    pub uc_strerror: UcStrerrorFn,
    pub uc_mem_map_ptr: UcMemMapPtrFn,
    pub uc_mem_unmap: UcMemUnmapFn,
    pub uc_mem_write: UcMemWriteFn,
    pub uc_mem_read: UcMemReadFn,
    pub uc_reg_write: UcRegWriteFn,
    pub uc_reg_read: UcRegReadFn,
    pub uc_reg_write_batch: UcRegWriteBatchFn,
    pub uc_reg_read_batch: UcRegReadBatchFn,
    pub uc_emu_start: UcEmuStartFn,
    pub uc_emu_stop: UcEmuStopFn,
    pub uc_hook_add: UcHookAddFn,
    pub uc_hook_del: UcHookDelFn,
}

impl Api {
    /// Unicorn's text for an error code.
    pub fn strerror(&self, code: UcErr) -> String {
        // SAFETY: uc_strerror returns a pointer to a static NUL-terminated
        // string for every code, known or not.
        unsafe { CStr::from_ptr((self.uc_strerror)(code)) }
            .to_string_lossy()
            .into_owned()
    }
}

/// The library's functions, loaded on first use; the error says why they
/// could not be.
pub fn api() -> Result<&'static Api, String> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until
    // the next dl call on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn load() -> Result<Api, String> {
    load_from(LIBRARY)
}

/// Loads Unicorn 2 from the shared library `library`.
fn load_from(library: &str) -> Result<Api, String> {
    let name = CString::new(library).map_err(|_| format!("{library:?}: a NUL in the name"))?;
    // SAFETY: a NUL-terminated name; the handle is kept for the life of
    // the process (never closed), so the functions stay valid.
    let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        return Err(format!(
            "cannot load {library} ({}); Debian: apt-get install libunicorn2 (tools/setup does)",
            dlerror()
        ));
    }
    let symbol = |sym: &str| -> Result<*mut c_void, String> {
        let c = CString::new(sym).expect("no NUL in the name");
        // SAFETY: a live handle and a NUL-terminated name.
        let f = unsafe { libc::dlsym(lib, c.as_ptr()) };
        if f.is_null() {
            Err(format!("{library} has no {sym}: {}", dlerror()))
        } else {
            Ok(f)
        }
    };
    macro_rules! function {
        ($name:ident: $type:ty) => {{
            let f = symbol(stringify!($name))?;
            // SAFETY: the symbol is Unicorn 2's function of that name,
            // whose C prototype (unicorn/unicorn.h) the type matches.
            unsafe { std::mem::transmute::<*mut c_void, $type>(f) }
        }};
    }
    let version = {
        let f = function!(uc_version: unsafe extern "C" fn(*mut u32, *mut u32) -> u32);
        // SAFETY: uc_version accepts null pointers for the parts it is not
        // asked for.
        unsafe { f(std::ptr::null_mut(), std::ptr::null_mut()) }
    };
    // The constants of this module are Unicorn 2's.
    if version >> 24 != 2 {
        return Err(format!("{library} is version {version:#010x}, not 2"));
    }
    Ok(Api {
        uc_open: function!(uc_open: UcOpenFn),
        uc_close: function!(uc_close: UcCloseFn),
        uc_strerror: function!(uc_strerror: UcStrerrorFn),
        uc_mem_map_ptr: function!(uc_mem_map_ptr: UcMemMapPtrFn),
        uc_mem_unmap: function!(uc_mem_unmap: UcMemUnmapFn),
        uc_mem_write: function!(uc_mem_write: UcMemWriteFn),
        uc_mem_read: function!(uc_mem_read: UcMemReadFn),
        uc_reg_write: function!(uc_reg_write: UcRegWriteFn),
        uc_reg_read: function!(uc_reg_read: UcRegReadFn),
        uc_reg_write_batch: function!(uc_reg_write_batch: UcRegWriteBatchFn),
        uc_reg_read_batch: function!(uc_reg_read_batch: UcRegReadBatchFn),
        uc_emu_start: function!(uc_emu_start: UcEmuStartFn),
        uc_emu_stop: function!(uc_emu_stop: UcEmuStopFn),
        uc_hook_add: function!(uc_hook_add: UcHookAddFn),
        uc_hook_del: function!(uc_hook_del: UcHookDelFn),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_clear_error() {
        let Err(e) = load_from("libunicorn-not-here.so.2") else {
            panic!("a library that does not exist loaded");
        };
        assert!(
            e.starts_with("cannot load libunicorn-not-here.so.2 ("),
            "{e}"
        );
        assert!(e.contains("apt-get install libunicorn2"), "{e}");
    }

    #[test]
    fn a_library_without_unicorn_is_a_clear_error() {
        // The C library is loaded in every process and has no uc_version.
        let Err(e) = load_from("libc.so.6") else {
            panic!("libc passed for Unicorn");
        };
        assert!(e.starts_with("libc.so.6 has no uc_version"), "{e}");
    }
}

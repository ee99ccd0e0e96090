//! The emulator under [`crate::cpu`]: Unicorn 2 (Debian's `libunicorn2`),
//! linked dynamically, through the few of its C functions ksim needs.
//!
//! The declarations are written here rather than taken from a crate: the
//! interface used is a dozen functions and constants, and the
//! `unicorn-engine` crate would build its own copy of QEMU instead of
//! using the system's library. The constants are those of Unicorn 2.0's
//! `unicorn/unicorn.h`, `x86.h` and `arm64.h`; the build script checks them
//! against the installed headers (`cpu/unicorn_check.c`).
//!
//! Nothing outside `cpu` sees this module.

use std::ffi::{CStr, c_char, c_int, c_void};

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
pub const UC_X86_INS_SYSCALL: c_int = 699;

pub const UC_ARM64_REG_X29: c_int = 1;
pub const UC_ARM64_REG_NZCV: c_int = 3;
pub const UC_ARM64_REG_SP: c_int = 4;
pub const UC_ARM64_REG_X0: c_int = 199;
pub const UC_ARM64_REG_X8: c_int = 207;
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

#[link(name = "unicorn")]
unsafe extern "C" {
    pub fn uc_open(arch: c_int, mode: c_int, uc: *mut UcEngine) -> UcErr;
    pub fn uc_close(uc: UcEngine) -> UcErr;
    pub fn uc_strerror(code: UcErr) -> *const c_char;
    pub fn uc_mem_map(uc: UcEngine, address: u64, size: usize, perms: u32) -> UcErr;
    pub fn uc_mem_protect(uc: UcEngine, address: u64, size: usize, perms: u32) -> UcErr;
    pub fn uc_mem_write(uc: UcEngine, address: u64, bytes: *const c_void, size: usize) -> UcErr;
    pub fn uc_mem_read(uc: UcEngine, address: u64, bytes: *mut c_void, size: usize) -> UcErr;
    pub fn uc_reg_write(uc: UcEngine, regid: c_int, value: *const c_void) -> UcErr;
    pub fn uc_reg_read(uc: UcEngine, regid: c_int, value: *mut c_void) -> UcErr;
    pub fn uc_emu_start(uc: UcEngine, begin: u64, until: u64, timeout: u64, count: usize) -> UcErr;
    pub fn uc_emu_stop(uc: UcEngine) -> UcErr;
    /// Variadic: `UC_HOOK_INSN` takes the instruction id after `end`.
    pub fn uc_hook_add(
        uc: UcEngine,
        hh: *mut UcHook,
        kind: c_int,
        callback: *mut c_void,
        user_data: *mut c_void,
        begin: u64,
        end: u64,
        ...
    ) -> UcErr;
    pub fn uc_hook_del(uc: UcEngine, hh: UcHook) -> UcErr;
}

/// Unicorn's text for an error code.
pub fn strerror(code: UcErr) -> String {
    // SAFETY: uc_strerror returns a pointer to a static NUL-terminated
    // string for every code, known or not.
    unsafe { CStr::from_ptr(uc_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

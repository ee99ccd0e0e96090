//! Extended errors (exterror(9)): `sys/sys/_uexterror.h`, the user-visible
//! constants of `sys/sys/exterrvar.h`, and the categories of
//! `sys/sys/exterr_cat.h` that hwpmc uses.
//!
//! A thread registers a `struct uexterror` with exterrctl(2)
//! ([`EXTERRCTL_ENABLE`]; FreeBSD's libc does so for every thread); when a
//! system call fails, the kernel copies into it what the failing code
//! recorded with `EXTERROR()`: the errno, the category (the source file),
//! the line, two numbers and a message. FreeBSD 15.0 has the mechanism;
//! the hwpmc categories come with the 2026 driver.

use crate::plain::{impl_as_bytes, impl_plain};

/// `UEXTERROR_MAXLEN`: the longest text uexterr_gettext(3) makes.
pub const UEXTERROR_MAXLEN: usize = 256;
/// `UEXTERROR_VER`: the version a registered `struct uexterror` carries.
pub const UEXTERROR_VER: u32 = 0x1001_0002;
/// `EXTERRCTL_ENABLE`: register the calling thread's `struct uexterror`.
pub const EXTERRCTL_ENABLE: u32 = 1;
/// `EXTERRCTL_DISABLE`: unregister it.
pub const EXTERRCTL_DISABLE: u32 = 2;
/// `EXTERRCTL_UD`: always fails with EINVAL and no extended error (for
/// tests that clear the last one).
pub const EXTERRCTL_UD: u32 = 3;
/// `EXTERRCTLF_FORCE`: replace a registration.
pub const EXTERRCTLF_FORCE: u32 = 0x0000_0001;

/// `EXTERR_CAT_HWPMC_IBS` (2026): `sys/dev/hwpmc/hwpmc_ibs.c`.
pub const EXTERR_CAT_HWPMC_IBS: u32 = 18;
/// `EXTERR_CAT_HWPMC_AMD` (2026): `sys/dev/hwpmc/hwpmc_amd.c`.
pub const EXTERR_CAT_HWPMC_AMD: u32 = 20;
/// `EXTERR_CAT_HWPMC_MOD` (2026): `sys/dev/hwpmc/hwpmc_mod.c`.
pub const EXTERR_CAT_HWPMC_MOD: u32 = 21;

/// The source file of a category, as libc's table names it
/// (`lib/libc/gen/exterr_cat_filenames.h`), for the hwpmc categories.
pub fn category_file(cat: u32) -> Option<&'static str> {
    match cat {
        EXTERR_CAT_HWPMC_IBS => Some("dev/hwpmc/hwpmc_ibs.c"),
        EXTERR_CAT_HWPMC_AMD => Some("dev/hwpmc/hwpmc_amd.c"),
        EXTERR_CAT_HWPMC_MOD => Some("dev/hwpmc/hwpmc_mod.c"),
        _ => None,
    }
}

/// Length of `uexterror.msg`.
pub const UEXTERROR_MSG_LEN: usize = 128;

/// `struct uexterror`: a thread's last extended error, in user memory.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uexterror {
    /// [`UEXTERROR_VER`], set by the user.
    pub ver: u32,
    /// The errno the failing code recorded; 0 when the last failed system
    /// call recorded none.
    pub error: u32,
    /// The category: which source file.
    pub cat: u32,
    /// The source line.
    pub src_line: u32,
    /// Reserved flags.
    pub flags: u32,
    /// Reserved.
    pub rsrv0: u32,
    /// First number of the message (a printf argument of `msg`).
    pub p1: u64,
    /// Second number.
    pub p2: u64,
    /// Reserved.
    pub rsrv1: [u64; 4],
    /// The message, NUL-terminated (empty in kernels without
    /// `options EXTERR_STRINGS`).
    pub msg: [u8; UEXTERROR_MSG_LEN],
}

impl_plain!(Uexterror);
impl_as_bytes!(Uexterror => [u32, u32, u32, u32, u32, u32, u64, u64, [u64; 4], [u8; UEXTERROR_MSG_LEN]]);

impl Default for Uexterror {
    fn default() -> Self {
        <Self as crate::Plain>::zeroed()
    }
}

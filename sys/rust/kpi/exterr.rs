//! exterror(9): an extended error for the failing system call, which
//! exterrctl(2)-registered user threads read back (libc's
//! uexterr_gettext(3) and err(3) show it).
//!
//! On FreeBSD the glue calls `exterr_set` only when the tree's
//! `sys/exterr_cat.h` has the hwpmc categories (FreeBSD after 15.0): in an
//! older tree nothing is recorded, as its C driver records nothing. The
//! simulated machine always records.

use core::ffi::CStr;

use crate::Errno;

/// `exterr_set(error, category, msg, p1, p2, line)`: records the error
/// of the running system call and returns `error`, to be returned by the
/// caller. `msg` is a printf(3) format for at most the two numbers, kept
/// by pointer until the call returns (hence `'static`).
pub fn set(error: Errno, category: u32, msg: &'static CStr, p1: u64, p2: u64, line: u32) -> Errno {
    super::backend::exterr_set(error, category, msg, p1, p2, line)
}

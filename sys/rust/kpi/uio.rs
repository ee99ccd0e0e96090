//! copyin(9) and copyout(9) of plain ABI structs.

use core::mem::{MaybeUninit, size_of};

use uapi::{AsBytes, Plain};

use crate::errno::KResult;
use crate::malloc::{KVec, Wait};

/// A user-space address of the current process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserPtr(pub u64);

impl UserPtr {
    /// The address `bytes` further on.
    pub const fn offset(self, bytes: usize) -> UserPtr {
        UserPtr(self.0.wrapping_add(bytes as u64))
    }
}

/// Copies a `T` in from user space; EFAULT for a bad address.
pub fn copyin<T: Plain>(from: UserPtr) -> KResult<T> {
    let mut value = MaybeUninit::<T>::zeroed();
    // SAFETY: the slice covers exactly the value's bytes, all of them
    // initialised (to zero) by `zeroed`.
    let bytes =
        unsafe { core::slice::from_raw_parts_mut(value.as_mut_ptr().cast::<u8>(), size_of::<T>()) };
    crate::backend::copyin(from.0, bytes)?;
    // SAFETY: every bit pattern is a valid `T` (the Plain contract).
    Ok(unsafe { value.assume_init() })
}

/// Copies `len` bytes in from user space, into memory allocated with
/// `wait`.
pub fn copyin_bytes(from: UserPtr, len: usize, wait: Wait) -> KResult<KVec<u8>> {
    let mut buf = KVec::zeroed(len, wait)?;
    crate::backend::copyin(from.0, &mut buf)?;
    Ok(buf)
}

/// Copies bytes out to user space; EFAULT for a bad address.
pub fn copyout_bytes(data: &[u8], to: UserPtr) -> KResult<()> {
    crate::backend::copyout(data, to.0)
}

/// Copies a `T` out to user space; only padding-free types qualify, so no
/// kernel bytes leak.
pub fn copyout<T: AsBytes>(value: &T, to: UserPtr) -> KResult<()> {
    copyout_bytes(value.as_bytes(), to)
}

/// copyinstr(9): a NUL-terminated string of at most `maxlen` bytes (NUL
/// included) from user space, without its NUL. EFAULT for a bad address,
/// ENAMETOOLONG when no NUL comes within `maxlen` bytes.
pub fn copyinstr(from: UserPtr, maxlen: usize, wait: Wait) -> KResult<KVec<u8>> {
    let mut out = KVec::with_capacity(maxlen, wait)?;
    // Byte by byte, as the string may end just before an unmapped page.
    for i in 0..maxlen {
        let mut b = [0u8; 1];
        crate::backend::copyin(from.offset(i).0, &mut b)?;
        if b[0] == 0 {
            return Ok(out);
        }
        // Capacity for maxlen bytes was reserved above.
        let _ = out.push_within_capacity(b[0]);
    }
    Err(crate::errno::ENAMETOOLONG)
}

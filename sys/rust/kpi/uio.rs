//! copyin(9) and copyout(9) of plain ABI structs.

use alloc::vec::Vec;
use core::mem::size_of;

use uapi::{AsBytes, Plain};

use crate::errno::KResult;

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
    let bytes = crate::backend::copyin(from.0, size_of::<T>())?;
    // The backend returned exactly size_of::<T>() bytes.
    Ok(T::read_from(&bytes).unwrap_or_else(T::zeroed))
}

/// Copies `len` bytes in from user space.
pub fn copyin_bytes(from: UserPtr, len: usize) -> KResult<Vec<u8>> {
    crate::backend::copyin(from.0, len)
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

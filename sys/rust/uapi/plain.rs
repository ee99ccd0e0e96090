//! Byte views of ABI structs.
//!
//! The argument structs cross the user/kernel boundary as raw bytes
//! (copyin, ioctl buffers, fuzz inputs). They contain only integers,
//! integer arrays, raw pointers and unions of those, so every bit pattern is
//! a valid value and reading one from bytes needs no validation.

use core::mem::{MaybeUninit, size_of};

/// A C struct for which every bit pattern of `size_of::<Self>()` bytes is a
/// valid value.
///
/// # Safety
/// Implement only for `#[repr(C)]` (or packed / union) types whose fields
/// are all integers, arrays of `Plain` types, raw pointers, or other
/// `Plain` types.
pub unsafe trait Plain: Copy + Sized {
    /// The all-zero value, as C code gets from `bzero`.
    fn zeroed() -> Self {
        // SAFETY: all-zero bytes are a valid `Self` by the trait contract.
        unsafe { MaybeUninit::<Self>::zeroed().assume_init() }
    }

    /// Reads a value from the first `size_of::<Self>()` bytes of `bytes`,
    /// whatever their alignment; `None` when `bytes` is too short.
    fn read_from(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < size_of::<Self>() {
            return None;
        }
        // SAFETY: the source holds at least size_of::<Self>() initialised
        // bytes, any bit pattern is a valid Self (trait contract), and
        // read_unaligned has no alignment requirement.
        Some(unsafe { bytes.as_ptr().cast::<Self>().read_unaligned() })
    }
}

/// Implements [`Plain`] for types that satisfy its contract.
macro_rules! impl_plain {
    ($($t:ty),+ $(,)?) => {
        $(
            // SAFETY: the type is repr(C)/packed/union of integers, integer
            // arrays, raw pointers and other Plain types only.
            unsafe impl $crate::plain::Plain for $t {}
        )+
    };
}
pub(crate) use impl_plain;

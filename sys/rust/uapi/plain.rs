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

/// A [`Plain`] type without padding bytes, so its bytes are always
/// initialised and may be copied out to user space as they are.
///
/// # Safety
/// Implement only for types whose size is the sum of their fields' sizes;
/// [`impl_as_bytes`] checks that at compile time from a list of the field
/// types.
pub unsafe trait AsBytes: Plain {
    /// The value's bytes in memory.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: the trait contract says every byte of Self belongs to a
        // field, and Plain fields are integers or arrays of them, so all
        // size_of::<Self>() bytes are initialised.
        unsafe {
            core::slice::from_raw_parts((self as *const Self).cast::<u8>(), size_of::<Self>())
        }
    }
}

/// Implements [`AsBytes`] for a type, given the types of all its fields,
/// after checking at compile time that they fill it without padding.
macro_rules! impl_as_bytes {
    ($($t:ty => [$($f:ty),* $(,)?]),+ $(,)?) => {
        $(
            const _: () = assert!(
                core::mem::size_of::<$t>() == 0 $(+ core::mem::size_of::<$f>())*,
                "type has padding"
            );
            // SAFETY: the assertion above shows the fields fill the type.
            unsafe impl $crate::plain::AsBytes for $t {}
        )+
    };
}
pub(crate) use impl_as_bytes;

impl_plain!(u8, u16, u32, u64, i32, i64, usize);
impl_as_bytes!(u8 => [u8], u16 => [u16], u32 => [u32], u64 => [u64], i32 => [i32], i64 => [i64], usize => [usize]);

//! FreeBSD errno values (`sys/errno.h`).

use core::num::NonZeroI32;

/// An error number as the kernel returns it to userland.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(NonZeroI32);

impl Errno {
    /// The error with number `e`; `None` for 0, which is success.
    pub const fn new(e: i32) -> Option<Errno> {
        match NonZeroI32::new(e) {
            Some(n) => Some(Errno(n)),
            None => None,
        }
    }
    /// The errno number.
    pub const fn get(self) -> i32 {
        self.0.get()
    }
}

/// An errno constant (non-zero, checked at compile time).
const fn constant(e: i32) -> Errno {
    match Errno::new(e) {
        Some(v) => v,
        None => panic!("errno 0 is success"),
    }
}

/// The kernel's result type.
pub type KResult<T> = Result<T, Errno>;

macro_rules! errnos {
    ($($name:ident = $v:expr, $doc:literal;)+) => {
        $( #[doc = $doc] pub const $name: Errno = constant($v); )+
        impl Errno {
            /// The symbolic name, e.g. `"EINVAL"`.
            pub const fn name(self) -> &'static str {
                match self.get() { $( $v => stringify!($name), )+ _ => "E?" }
            }
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted";
    ESRCH = 3, "No such process";
    EINTR = 4, "Interrupted system call";
    EIO = 5, "Input/output error";
    ENXIO = 6, "Device not configured";
    E2BIG = 7, "Argument list too long";
    EBADF = 9, "Bad file descriptor";
    EAGAIN = 35, "Resource temporarily unavailable";
    ENOMEM = 12, "Cannot allocate memory";
    EACCES = 13, "Permission denied";
    EFAULT = 14, "Bad address";
    EBUSY = 16, "Device busy";
    EEXIST = 17, "File exists";
    ENODEV = 19, "Operation not supported by device";
    EINVAL = 22, "Invalid argument";
    ENOSPC = 28, "No space left on device";
    EPIPE = 32, "Broken pipe";
    EOPNOTSUPP = 45, "Operation not supported";
    EPROGMISMATCH = 75, "Program version wrong";
    ENOSYS = 78, "Function not implemented";
    EFBIG = 27, "File too large";
    ENOENT = 2, "No such file or directory";
    ENAMETOOLONG = 63, "File name too long";
    EDOOFUS = 88, "Programming error";
}

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ({})", self.name(), self.get())
    }
}

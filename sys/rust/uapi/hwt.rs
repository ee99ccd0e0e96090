//! `sys/sys/hwt.h`: the ioctl interface of hwt(4).
//!
//! `/dev/hwt` accepts only [`HWT_IOC_ALLOC`]; the other commands go to a
//! context's own device. Every argument struct is 16-byte aligned, and all
//! commands are `_IOW`: results travel through user pointers in the struct.

use core::ffi::{c_char, c_void};
use core::mem::size_of;

use crate::PATH_MAX;
use crate::ioccom::iow;
use crate::plain::impl_plain;

/// ioctl group of hwt(4): `'B'`.
pub const HWT_MAGIC: u8 = 0x42;
/// Longest backend name, NUL included.
pub const HWT_BACKEND_MAXNAMELEN: usize = 256;
/// Trace every thread of one process.
pub const HWT_MODE_THREAD: i32 = 1;
/// Trace a set of CPUs.
pub const HWT_MODE_CPU: i32 = 2;

/// The opaque `cpuset_t` a [`HwtAlloc`] points to.
#[repr(C)]
#[derive(Debug)]
pub struct Cpuset {
    _opaque: [u8; 0],
}

/// `struct hwt_alloc`: [`HWT_IOC_ALLOC`].
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwtAlloc {
    /// Trace buffer size per thread or CPU; a multiple of the page size.
    pub bufsize: usize,
    /// [`HWT_MODE_THREAD`] or [`HWT_MODE_CPU`].
    pub mode: i32,
    /// Target process (thread mode).
    pub pid: i32,
    /// CPUs to trace (CPU mode).
    pub cpu_map: *mut Cpuset,
    /// Bytes at `cpu_map`.
    pub cpusetsize: usize,
    /// Backend: "pt", "spe" or "coresight".
    pub backend_name: *const c_char,
    /// Out: the new context's ident.
    pub ident: *mut i32,
    /// kqueue for backend notifications (SPE).
    pub kqueue_fd: i32,
}

/// `struct hwt_start`: [`HWT_IOC_START`].
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HwtStart {
    /// Unused.
    pub reserved: i32,
}

/// `struct hwt_stop`: [`HWT_IOC_STOP`].
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HwtStop {
    /// Unused.
    pub reserved: i32,
}

/// `struct hwt_wakeup`: [`HWT_IOC_WAKEUP`].
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HwtWakeup {
    /// Unused.
    pub reserved: i32,
}

/// Payload of MMAP, EXECUTABLE and KERNEL records.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwtRecordObject {
    /// Path of the object, NUL-padded.
    pub fullpath: [u8; PATH_MAX],
    /// Address it is mapped at.
    pub addr: usize,
    /// Base address (interpreter base for EXECUTABLE; 0 for KERNEL).
    pub baseaddr: usize,
}

/// Payload of BUFFER records.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HwtRecordBuffer {
    /// CPU (CPU mode) or thread index (thread mode) of the buffer.
    pub buf_id: i32,
    /// Page the trace unit is writing.
    pub curpage: i32,
    /// Offset within that page.
    pub offset: usize,
}

/// The anonymous union of [`HwtRecordUserEntry`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union HwtRecordPayload {
    /// MMAP, EXECUTABLE, KERNEL.
    pub object: HwtRecordObject,
    /// BUFFER.
    pub buffer: HwtRecordBuffer,
    /// THREAD_CREATE, THREAD_SET_NAME.
    pub thread_id: i32,
}

/// `struct hwt_record_user_entry`: one record returned by
/// [`HWT_IOC_RECORD_GET`].
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub struct HwtRecordUserEntry {
    /// [`crate::hwt_record::HwtRecordType`].
    pub record_type: u32,
    /// Type-dependent payload (anonymous in C).
    pub u: HwtRecordPayload,
}

impl core::fmt::Debug for HwtRecordPayload {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The active member depends on the record type; show none.
        f.debug_struct("HwtRecordPayload").finish_non_exhaustive()
    }
}

impl core::fmt::Debug for HwtRecordUserEntry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HwtRecordUserEntry")
            .field("record_type", &self.record_type)
            .finish_non_exhaustive()
    }
}

/// `struct hwt_record_get`: [`HWT_IOC_RECORD_GET`].
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwtRecordGet {
    /// Out: array of records.
    pub records: *mut HwtRecordUserEntry,
    /// In: capacity of `records`; out: entries written.
    pub nentries: *mut i32,
    /// Sleep until a record arrives when none is queued.
    pub wait: i32,
}

/// `struct hwt_bufptr_get`: [`HWT_IOC_BUFPTR_GET`].
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwtBufptrGet {
    /// Out: current page (or buffer id).
    pub ident: *mut i32,
    /// Out: offset in the buffer.
    pub offset: *mut usize,
    /// Out: backend-specific word.
    pub data: *mut u64,
}

/// `struct hwt_set_config`: [`HWT_IOC_SET_CONFIG`].
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwtSetConfig {
    /// Pause the target at exec and mmap until [`HWT_IOC_WAKEUP`].
    pub pause_on_mmap: i32,
    /// Backend configuration, passed on unchanged.
    pub config: *mut c_void,
    /// Bytes at `config`.
    pub config_size: usize,
    /// Version of the backend's configuration struct.
    pub config_version: i32,
}

/// `struct hwt_svc_buf`: [`HWT_IOC_SVC_BUF`].
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwtSvcBuf {
    /// Backend data, passed on unchanged.
    pub data: *mut c_void,
    /// Bytes at `data`.
    pub data_size: usize,
    /// Version of the data struct.
    pub data_version: i32,
}

impl_plain!(
    HwtAlloc,
    HwtStart,
    HwtStop,
    HwtWakeup,
    HwtRecordObject,
    HwtRecordBuffer,
    HwtRecordPayload,
    HwtRecordUserEntry,
    HwtRecordGet,
    HwtBufptrGet,
    HwtSetConfig,
    HwtSvcBuf,
);

/// Allocate a tracing context (on `/dev/hwt`).
pub const HWT_IOC_ALLOC: u32 = iow(HWT_MAGIC, 0x00, size_of::<HwtAlloc>());
/// Start tracing.
pub const HWT_IOC_START: u32 = iow(HWT_MAGIC, 0x01, size_of::<HwtStart>());
/// Stop tracing.
pub const HWT_IOC_STOP: u32 = iow(HWT_MAGIC, 0x02, size_of::<HwtStop>());
/// Fetch queued records.
pub const HWT_IOC_RECORD_GET: u32 = iow(HWT_MAGIC, 0x03, size_of::<HwtRecordGet>());
/// Read the trace unit's current buffer position.
pub const HWT_IOC_BUFPTR_GET: u32 = iow(HWT_MAGIC, 0x04, size_of::<HwtBufptrGet>());
/// Pass the backend configuration.
pub const HWT_IOC_SET_CONFIG: u32 = iow(HWT_MAGIC, 0x05, size_of::<HwtSetConfig>());
/// Resume a thread paused at exec or mmap.
pub const HWT_IOC_WAKEUP: u32 = iow(HWT_MAGIC, 0x06, size_of::<HwtWakeup>());
/// Tell the backend a buffer was consumed (SPE).
pub const HWT_IOC_SVC_BUF: u32 = iow(HWT_MAGIC, 0x07, size_of::<HwtSvcBuf>());

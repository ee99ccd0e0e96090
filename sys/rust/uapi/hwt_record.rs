//! `sys/sys/hwt_record.h`: the kinds of record hwt(4) queues for userland.

abi_enum! {
    /// `enum hwt_record_type`.
    pub enum HwtRecordType: u32 {
        Mmap = 0 => ("MMAP", "an object was mapped"),
        Munmap = 1 => ("MUNMAP", "an object was unmapped"),
        Executable = 2 => ("EXECUTABLE", "the process executed an image"),
        Kernel = 3 => ("KERNEL", "a kernel object"),
        ThreadCreate = 4 => ("THREAD_CREATE", "a thread was created"),
        ThreadSetName = 5 => ("THREAD_SET_NAME", "a thread was named"),
        Buffer = 6 => ("BUFFER", "trace data is ready in a buffer"),
    }
}

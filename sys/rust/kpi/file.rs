//! Files the kernel writes to on a process's behalf (the hwpmc log).

use crate::errno::KResult;

/// A kernel reference to an open file (`struct file *` after `fget`);
/// dropped with `fdrop`.
#[derive(Debug)]
pub struct KFile(u64);

/// `fget_write`: the file behind descriptor `fd` of the current process,
/// which must be open for writing (EBADF otherwise, also for directories).
pub fn fget_write(fd: i32) -> KResult<KFile> {
    crate::backend::fget_write(fd).map(KFile)
}

impl KFile {
    /// One `fo_write` of `data`: how many bytes the file took (fewer than
    /// offered on a short write; a write that took some bytes before an
    /// error reports them, and the error comes with the next write), or
    /// the error: EINTR to try again, EAGAIN when the file is full (a
    /// pipe whose reader is behind), anything else for good. May sleep.
    pub fn write(&self, data: &[u8]) -> KResult<usize> {
        crate::backend::file_write(self.0, data)
    }
}

impl Drop for KFile {
    fn drop(&mut self) {
        crate::backend::fdrop(self.0);
    }
}

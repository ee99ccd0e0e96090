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
    /// Writes all of `data` (`fo_write`); may sleep.
    pub fn write_all(&self, data: &[u8]) -> KResult<()> {
        crate::backend::file_write(self.0, data)
    }
}

impl Drop for KFile {
    fn drop(&mut self) {
        crate::backend::fdrop(self.0);
    }
}

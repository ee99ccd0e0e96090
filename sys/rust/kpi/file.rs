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

/// The most bytes a [`NotifyFile`] record holds.
pub const NOTIFY_RECORD_MAX: usize = 64;

/// A descriptor the kernel makes for a process to wait on (hwpmc's
/// notification descriptor): read(2) returns the latest record posted, or
/// blocks (EAGAIN with O_NONBLOCK) until one is; poll(2) and kqueue(2)
/// report a pending record as readable, and the end ([`NotifyFile::hangup`])
/// as POLLHUP / EV_EOF, after which a read returns end of file. Records do
/// not queue: a post replaces a record nobody read, so a process that
/// never reads costs nothing.
#[derive(Debug)]
pub struct NotifyFile(u64);

/// `falloc` + `finit` + `finstall`: a new close-on-exec descriptor of the
/// current process for a notification file whose records are `record_len`
/// bytes (at most [`NOTIFY_RECORD_MAX`]; EINVAL otherwise): the file and
/// the descriptor's number. May sleep; EMFILE / ENFILE without a free
/// descriptor or file.
pub fn notify_file_create(record_len: usize) -> KResult<(NotifyFile, i32)> {
    if record_len == 0 || record_len > NOTIFY_RECORD_MAX {
        return Err(crate::errno::EINVAL);
    }
    crate::backend::notify_create(record_len).map(|(id, fd)| (NotifyFile(id), fd))
}

impl NotifyFile {
    /// Makes `record` (the file's record length; longer is cut, shorter is
    /// padded with zeros) the pending record and wakes the file's readers,
    /// pollers and knotes. Takes a sleep mutex: thread context, no spin
    /// lock held. Nothing happens once the process has closed the
    /// descriptor.
    pub fn post(&self, record: &[u8]) {
        crate::backend::notify_post(self.0, record);
    }
    /// Ends the file: after its pending record, readers get end of file.
    /// Thread context, as [`NotifyFile::post`].
    pub fn hangup(&self) {
        crate::backend::notify_hangup(self.0);
    }
}

impl Drop for NotifyFile {
    fn drop(&mut self) {
        crate::backend::notify_release(self.0);
    }
}

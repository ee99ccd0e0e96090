//! Open files: descriptors, what was written to them, and the readers of
//! pipes.

use super::*;

impl File {
    pub(crate) fn new(kind: FileKind, writable: bool) -> File {
        File {
            kind,
            writable,
            data: Vec::new(),
            refs: 1,
            writes: 0,
            unread: 0,
            waiters: Vec::new(),
            notify: None,
        }
    }
}

impl State {
    /// Enters `file` and gives it the lowest free descriptor of `pid` from
    /// 3 on: (descriptor, file id); None for an unknown pid.
    pub(crate) fn install_file(&mut self, pid: u32, file: File) -> Option<(i32, u64)> {
        if !self.procs.contains_key(&pid) {
            return None;
        }
        let id = self.next_file;
        self.next_file += 1;
        self.files.insert(id, file);
        let p = self.procs.get_mut(&pid)?;
        let fd = (3..).find(|fd| !p.fds.contains_key(fd)).unwrap_or(3);
        p.fds.insert(fd, id);
        Some((fd, id))
    }
}

impl Machine {
    /// Opens a file of `kind` in `pid`; returns the lowest free descriptor
    /// from 3 on.
    pub fn open(&self, pid: u32, kind: FileKind, writable: bool) -> i32 {
        let mut st = self.st();
        let writable = writable && kind != FileKind::Directory;
        st.install_file(pid, File::new(kind, writable))
            .expect("open in unknown pid")
            .0
    }

    /// read(2) of notification descriptor `fd` of `pid`: its pending
    /// record (taken), nothing, or its end; None when `fd` is not a
    /// notification descriptor.
    pub fn notify_read(&self, pid: u32, fd: i32) -> Option<NotifyRead> {
        let id = self.file_of(pid, fd)?;
        self.notify_read_file(id)
    }

    /// [`Machine::notify_read`] by file.
    pub fn notify_read_file(&self, id: u64) -> Option<NotifyRead> {
        let mut st = self.st();
        let n = st.files.get_mut(&id)?.notify.as_mut()?;
        Some(match n.pending.take() {
            Some(r) => NotifyRead::Record(r),
            None if n.hup => NotifyRead::End,
            None => NotifyRead::Empty,
        })
    }

    /// poll(2) of a notification file: (a record is pending, hung up).
    pub fn notify_poll_file(&self, id: u64) -> Option<(bool, bool)> {
        let st = self.st();
        let n = st.files.get(&id)?.notify.as_ref()?;
        Some((n.pending.is_some(), n.hup))
    }

    /// Records posted on a notification file so far.
    pub fn notify_posts(&self, id: u64) -> Option<u64> {
        let st = self.st();
        Some(st.files.get(&id)?.notify.as_ref()?.posts)
    }

    /// Calls `f` with the file of each post on a notification file from
    /// now on, when the post is made (None: no more).
    pub fn observe_notify_posts(&self, f: Option<NotifyObserver>) {
        self.0.handlers().notify_observer = f;
    }

    /// The signals sent to threads with a value since the last call.
    pub fn take_thread_signals(&self) -> Vec<ThreadSignal> {
        std::mem::take(&mut self.st().thread_signals)
    }

    /// close(2).
    pub fn close(&self, pid: u32, fd: i32) {
        let mut st = self.st();
        let id = st.procs.get_mut(&pid).and_then(|p| p.fds.remove(&fd));
        if let Some(id) = id {
            st.unref_file(id);
        }
    }

    /// Kernel processes blocked writing to a host descriptor try again
    /// (the host's reader may have made room): ksimd calls it as time
    /// passes and before each request.
    pub fn retry_host_writers(&self) {
        let woken: Vec<u64> = {
            let mut st = self.st();
            st.files
                .values_mut()
                .filter(|f| matches!(f.kind, FileKind::Host { .. }))
                .flat_map(|f| std::mem::take(&mut f.waiters))
                .collect()
        };
        if woken.is_empty() {
            return;
        }
        {
            let mut st = self.st();
            for k in woken {
                if let Some(k) = st.kprocs.get_mut(&k) {
                    k.pending = true;
                }
            }
        }
        self.settle();
    }

    /// The reader of a pipe reads everything written so far: writers
    /// blocked on it are woken and run.
    pub fn drain(&self, id: u64) {
        let woken = {
            let mut st = self.st();
            let Some(f) = st.files.get_mut(&id) else {
                return;
            };
            f.unread = 0;
            std::mem::take(&mut f.waiters)
        };
        {
            let mut st = self.st();
            for k in woken {
                if let Some(k) = st.kprocs.get_mut(&k) {
                    k.pending = true;
                }
            }
        }
        self.settle();
    }

    /// The file a descriptor refers to.
    pub fn file_of(&self, pid: u32, fd: i32) -> Option<u64> {
        self.0
            .st()
            .procs
            .get(&pid)
            .and_then(|p| p.fds.get(&fd).copied())
    }

    /// The bytes of file `id` from `offset` on (nothing past its end), for
    /// copying out a file that grows without re-reading all of it.
    pub fn file_data_from(&self, id: u64, offset: usize) -> Vec<u8> {
        self.0
            .st()
            .files
            .get(&id)
            .and_then(|f| f.data.get(offset..))
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    /// Everything written to a file.
    pub fn file_data(&self, id: u64) -> Vec<u8> {
        self.0
            .st()
            .files
            .get(&id)
            .map(|f| f.data.clone())
            .unwrap_or_default()
    }

    /// Descriptors and kernel references to a file.
    pub fn file_refs(&self, id: u64) -> u32 {
        self.0.st().files.get(&id).map_or(0, |f| f.refs)
    }
}

//! Open files: descriptors, what was written to them, and the readers of
//! pipes.

use super::*;

impl Machine {
    /// Opens a file of `kind` in `pid`; returns the lowest free descriptor
    /// from 3 on.
    pub fn open(&self, pid: u32, kind: FileKind, writable: bool) -> i32 {
        let mut st = self.st();
        let id = st.next_file;
        st.next_file += 1;
        let writable = writable && kind != FileKind::Directory;
        st.files.insert(
            id,
            File {
                kind,
                writable,
                data: Vec::new(),
                refs: 1,
                writes: 0,
                unread: 0,
                waiters: Vec::new(),
            },
        );
        let p = st.procs.get_mut(&pid).expect("open in unknown pid");
        let fd = (3..).find(|fd| !p.fds.contains_key(fd)).unwrap_or(3);
        p.fds.insert(fd, id);
        fd
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

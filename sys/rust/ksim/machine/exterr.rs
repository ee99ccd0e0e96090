//! Extended errors (exterror(9), exterrctl(2)), as sys_generic.c and
//! subr_syscall.c keep them: a thread registers a `struct uexterror` in
//! its memory; kernel code records an error with `exterr_set` while a
//! system call runs; when the call fails, the record (or, without one, a
//! zero error) is copied out to the registered structure.

use core::ffi::CStr;
use core::mem::offset_of;

use uapi::AsBytes;
use uapi::exterr::{
    EXTERRCTL_DISABLE, EXTERRCTL_ENABLE, EXTERRCTLF_FORCE, UEXTERROR_MSG_LEN, UEXTERROR_VER,
    Uexterror,
};

use super::*;
use crate::errno::{EFAULT, EINVAL};

/// `struct kexterr`: what `exterr_set` recorded for the current call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kexterr {
    pub(crate) error: i32,
    pub(crate) category: u32,
    /// NULL in kernels without `options EXTERR_STRINGS`.
    pub(crate) msg: Option<&'static CStr>,
    pub(crate) p1: u64,
    pub(crate) p2: u64,
    pub(crate) line: u32,
}

/// EBUSY.
const EBUSY: i32 = 16;
/// SIGSEGV, sent when the copy-out faults.
const SIGSEGV: i32 = 11;

impl Machine {
    /// exterrctl(2) by thread `tid`: `op` is `EXTERRCTL_ENABLE` (register
    /// the `struct uexterror` at `ptr`, whose `ver` must be
    /// `UEXTERROR_VER`), `EXTERRCTL_DISABLE`, or anything else (EINVAL,
    /// `EXTERRCTL_UD` among them). A failure is a failed system call: it
    /// clears a registered structure's error.
    pub fn exterrctl(&self, tid: u32, op: u32, flags: u32, ptr: u64) -> Result<(), i32> {
        self.exterr_clear(tid);
        let r = self.exterrctl_op(tid, op, flags, ptr);
        if r.is_err() {
            self.exterr_copyout(tid);
        }
        r
    }

    fn exterrctl_op(&self, tid: u32, op: u32, flags: u32, ptr: u64) -> Result<(), i32> {
        if flags & !EXTERRCTLF_FORCE != 0 {
            return Err(EINVAL);
        }
        let mut st = self.st();
        let pid = st
            .threads
            .get(&tid)
            .expect("exterrctl by unknown thread")
            .pid;
        match op {
            EXTERRCTL_ENABLE => {
                let registered = st.threads[&tid].exterr_ptr.is_some();
                if registered && flags & EXTERRCTLF_FORCE == 0 {
                    return Err(EBUSY);
                }
                st.threads.get_mut(&tid).unwrap().exterr_ptr = None;
                let ver = st.umem_read(pid, ptr, 4).ok_or(EFAULT)?;
                if u32::from_ne_bytes(ver[..4].try_into().expect("4 bytes")) != UEXTERROR_VER {
                    return Err(EINVAL);
                }
                st.threads.get_mut(&tid).unwrap().exterr_ptr = Some(ptr);
                Ok(())
            }
            EXTERRCTL_DISABLE => {
                let t = st.threads.get_mut(&tid).unwrap();
                t.exterr_ptr.take().map(|_| ()).ok_or(EINVAL)
            }
            _ => Err(EINVAL),
        }
    }

    /// Whether thread `tid` has a `struct uexterror` registered.
    pub fn exterr_registered(&self, tid: u32) -> bool {
        self.st()
            .threads
            .get(&tid)
            .is_some_and(|t| t.exterr_ptr.is_some())
    }

    /// At system call entry: no extended error yet.
    pub(crate) fn exterr_clear(&self, tid: u32) {
        if let Some(t) = self.st().threads.get_mut(&tid) {
            t.kexterr = None;
        }
    }

    /// `exterr_copyout`: after a failed system call, the record (or a zero
    /// error) goes to the registered structure, whose `ver` stays the
    /// user's. A fault unregisters it and signals SIGSEGV, as FreeBSD does.
    pub(crate) fn exterr_copyout(&self, tid: u32) {
        let mut st = self.st();
        let Some(t) = st.threads.get(&tid) else {
            return;
        };
        let (Some(ptr), kexterr, pid) = (t.exterr_ptr, t.kexterr, t.pid) else {
            return;
        };
        let from = offset_of!(Uexterror, error);
        let mut ue = Uexterror::default();
        let len = match kexterr {
            Some(k) => {
                ue.error = k.error as u32;
                ue.cat = k.category;
                ue.src_line = k.line;
                ue.p1 = k.p1;
                ue.p2 = k.p2;
                if let Some(msg) = k.msg {
                    // strlcpy: cut to the field, NUL-terminated.
                    let bytes = msg.to_bytes();
                    let n = bytes.len().min(UEXTERROR_MSG_LEN - 1);
                    ue.msg[..n].copy_from_slice(&bytes[..n]);
                }
                core::mem::size_of::<Uexterror>() - from
            }
            None => 4,
        };
        let bytes = &ue.as_bytes()[from..from + len];
        if st.umem_write(pid, ptr + from as u64, bytes).is_none() {
            st.threads.get_mut(&tid).unwrap().exterr_ptr = None;
            st.signals.push((pid, SIGSEGV));
        }
    }
}

impl State {
    /// `exterr_set` for the current thread: recorded only when the
    /// thread registered a structure (`TDP2_UEXTERR`).
    pub(crate) fn exterr_set(&mut self, mut k: Kexterr) {
        if !self.cfg.exterr_strings {
            k.msg = None;
        }
        let (_, tid) = self.cur();
        if let Some(t) = self.threads.get_mut(&tid) {
            if t.exterr_ptr.is_some() {
                t.kexterr = Some(k);
            }
        }
    }

    /// fork: the child's thread keeps the parent thread's registration
    /// (kern_fork.c); exec: a process's threads lose theirs (kern_exec.c).
    pub(crate) fn exterr_inherit(&mut self, from_tid: u32, to_tid: u32, keep: bool) {
        let ptr = if keep {
            self.threads.get(&from_tid).and_then(|t| t.exterr_ptr)
        } else {
            None
        };
        if let Some(t) = self.threads.get_mut(&to_tid) {
            t.exterr_ptr = ptr;
            t.kexterr = None;
        }
    }
}

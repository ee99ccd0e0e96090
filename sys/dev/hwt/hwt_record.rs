//! Records (hwt_record.c): what happened to a traced process (exec,
//! mmap, munmap, new threads), the kernel's objects in CPU mode, and the
//! backends' buffer notices, queued for userland's RECORD_GET.

use kpi::KResult;
use kpi::errno::ENXIO;
use kpi::malloc::{KArc, KBox, KVec, Wait};
use kpi::sync::Chan;
use kpi::sync::MutexBox;
use kpi::uio::{UserPtr, copyin, copyout_bytes};
use uapi::hwt::HwtRecordGet;
use uapi::hwt_record::HwtRecordType;

use crate::hwt_context::HwtContext;

/// The most records one RECORD_GET returns.
const HWT_RECORD_BATCH_MAX: i32 = 1024;
/// `sizeof(struct hwt_record_user_entry)`.
const USER_ENTRY_SIZE: usize = core::mem::size_of::<uapi::hwt::HwtRecordUserEntry>();
/// `MAXPATHLEN`.
const MAXPATHLEN: usize = 1024;

/// A queued record (`struct hwt_record_entry`).
#[derive(Debug)]
pub(crate) enum Record {
    /// MMAP, EXECUTABLE or KERNEL: an object and where it went.
    Object {
        kind: HwtRecordType,
        path: KVec<u8>,
        addr: u64,
        baseaddr: u64,
    },
    /// MUNMAP, with the address (FreeBSD drops it on the way out).
    Munmap { addr: u64 },
    /// THREAD_CREATE or THREAD_SET_NAME.
    Thread { kind: HwtRecordType, thread_id: i32 },
    /// BUFFER: a backend's position in a buffer.
    Buffer {
        buf_id: i32,
        curpage: i32,
        offset: u64,
    },
}

impl Record {
    /// `hwt_record_to_user`: the record as userland reads it.
    fn to_user(&self, out: &mut [u8]) {
        out.fill(0);
        let kind = self.kind();
        out[0..4].copy_from_slice(&kind.raw().to_ne_bytes());
        match self {
            Record::Object {
                path,
                addr,
                baseaddr,
                ..
            } => {
                // strncpy into MAXPATHLEN: NUL padded, cut at the end.
                let n = path.len().min(MAXPATHLEN);
                out[8..8 + n].copy_from_slice(&path[..n]);
                out[1032..1040].copy_from_slice(&addr.to_ne_bytes());
                out[1040..1048].copy_from_slice(&baseaddr.to_ne_bytes());
            }
            Record::Munmap { addr } => {
                out[1032..1040].copy_from_slice(&addr.to_ne_bytes());
            }
            Record::Thread { thread_id, .. } => {
                out[8..12].copy_from_slice(&thread_id.to_ne_bytes());
            }
            Record::Buffer {
                buf_id,
                curpage,
                offset,
            } => {
                out[8..12].copy_from_slice(&buf_id.to_ne_bytes());
                out[12..16].copy_from_slice(&curpage.to_ne_bytes());
                out[16..24].copy_from_slice(&offset.to_ne_bytes());
            }
        }
    }

    fn kind(&self) -> HwtRecordType {
        match self {
            Record::Object { kind, .. } | Record::Thread { kind, .. } => *kind,
            Record::Munmap { .. } => HwtRecordType::Munmap,
            Record::Buffer { .. } => HwtRecordType::Buffer,
        }
    }
}

/// The queue: a ring of records, oldest first. It grows without
/// sleeping (under a default mutex, M_NOWAIT); a record that finds no
/// room is dropped, as FreeBSD drops one it cannot allocate.
#[derive(Debug, Default)]
pub(crate) struct RecordQueue {
    slots: KVec<Option<KBox<Record>>>,
    head: usize,
    len: usize,
    /// Records dropped for want of memory.
    pub(crate) dropped: u64,
    /// The context is being torn down: RECORD_GET no longer waits.
    closed: bool,
}

impl RecordQueue {
    fn push(&mut self, rec: KBox<Record>, front: bool) -> Result<(), KBox<Record>> {
        if self.len == self.slots.len() && self.grow().is_err() {
            return Err(rec);
        }
        let cap = self.slots.len();
        let at = if front {
            self.head = (self.head + cap - 1) % cap;
            self.head
        } else {
            (self.head + self.len) % cap
        };
        self.slots[at] = Some(rec);
        self.len += 1;
        Ok(())
    }

    fn grow(&mut self) -> KResult<()> {
        let cap = (self.slots.len() * 2).max(16);
        let mut bigger = KVec::with_capacity(cap, Wait::NoWait)?;
        for i in 0..self.len {
            let at = (self.head + i) % self.slots.len();
            let _ = bigger.push_within_capacity(self.slots[at].take());
        }
        while bigger.len() < cap {
            let _ = bigger.push_within_capacity(None);
        }
        self.slots = bigger;
        self.head = 0;
        Ok(())
    }

    fn pop(&mut self) -> Option<KBox<Record>> {
        if self.len == 0 {
            return None;
        }
        let rec = self.slots[self.head].take();
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        rec
    }

    /// The number of records queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `hwt_record_free_all`.
    pub(crate) fn clear(&mut self) {
        while self.pop().is_some() {}
    }
}

/// A context's record queue and its waiters.
#[derive(Debug)]
pub(crate) struct Records {
    pub(crate) queue: MutexBox<RecordQueue>,
}

impl Records {
    /// Queues `rec` at the head or the tail and wakes RECORD_GET waiters
    /// (`hwt_record_ctx`).
    fn enqueue_at(&self, rec: Record, front: bool, wait: Wait) {
        let Ok(rec) = KBox::try_new(rec, wait) else {
            self.queue.lock().dropped += 1;
            return;
        };
        let refused = {
            let mut q = self.queue.lock();
            let r = q.push(rec, front);
            if r.is_err() {
                q.dropped += 1;
            }
            r.err()
        };
        // A refused record is freed outside the lock.
        drop(refused);
        kpi::sync::wakeup(self.chan());
    }

    /// The wait channel of RECORD_GET.
    fn chan(&self) -> Chan {
        Chan::of(self)
    }

    /// The context is going: a RECORD_GET that waits for a record, or is
    /// about to, returns with what there is, letting its reference to
    /// the context go (FreeBSD's unload leaves contexts alone; this one
    /// tears them down, and would wait for that waiter for ever).
    pub(crate) fn close(&self) {
        self.queue.lock().closed = true;
        kpi::sync::wakeup(self.chan());
    }
}

/// Where a backend queues BUFFER records for a context's userland.
#[derive(Debug, Clone)]
pub struct RecordSink(pub(crate) KArc<Records>);

impl RecordSink {
    /// Queues a BUFFER record (`buf_id`, `curpage`, `offset`) and wakes
    /// RECORD_GET waiters; dropped if memory is short (M_NOWAIT, as
    /// FreeBSD's software interrupt allocates). Thread or software
    /// interrupt context, not an NMI.
    pub fn record_buffer(&self, buf_id: i32, curpage: i32, offset: u64) {
        self.0.enqueue_at(
            Record::Buffer {
                buf_id,
                curpage,
                offset,
            },
            false,
            Wait::NoWait,
        );
    }

    /// The records dropped for want of memory so far.
    pub fn dropped(&self) -> u64 {
        self.0.queue.lock().dropped
    }
}

impl HwtContext {
    /// Queues `rec` at the tail and wakes RECORD_GET waiters.
    pub(crate) fn enqueue(&self, rec: Record) {
        self.records.enqueue_at(rec, false, Wait::WaitOk);
    }

    /// Queues `rec` at the head or the tail.
    pub(crate) fn enqueue_at(&self, rec: Record, front: bool) {
        self.records.enqueue_at(rec, front, Wait::WaitOk);
    }

    /// `hwt_record_kernel_objects`: one KERNEL record per kernel object,
    /// each put at the head of the queue in the linker's order, as
    /// FreeBSD's does: the last module loaded comes first, the kernel
    /// last.
    pub(crate) fn record_kernel_objects(&self) -> KResult<()> {
        let objects = kpi::kern_pmc::kernel_objects(Wait::WaitOk)?;
        for o in objects.iter() {
            self.enqueue_at(
                Record::Object {
                    kind: HwtRecordType::Kernel,
                    path: KVec::try_from_slice(&o.path, Wait::WaitOk)?,
                    addr: o.start,
                    baseaddr: 0,
                },
                true,
            );
        }
        Ok(())
    }
}

/// RECORD_GET (`hwt_record_send`): up to `*nentries` records (1 to 1024,
/// else ENXIO) to `records`, the count back to `*nentries`; with `wait`
/// and an empty queue, sleeps until a record comes (or a signal, or the
/// context goes).
pub(crate) fn record_send(ctx: &HwtContext, arg: &HwtRecordGet) -> KResult<()> {
    let nentries = UserPtr(arg.nentries as u64);
    let want: i32 = copyin(nentries)?;
    if !(1..=HWT_RECORD_BATCH_MAX).contains(&want) {
        return Err(ENXIO);
    }
    let want = want as usize;
    let mut out = KVec::zeroed(USER_ENTRY_SIZE * want, Wait::WaitOk)?;
    if arg.wait != 0 {
        let q = ctx.records.queue.lock();
        if q.len() == 0 && !q.closed {
            // A signal ends the wait with nothing read, as in FreeBSD.
            let (_q, _r) = q.sleep(ctx.records.chan(), c"recsnd", true);
        }
    }
    let mut n = 0;
    while n < want {
        let rec = ctx.records.queue.lock().pop();
        let Some(rec) = rec else { break };
        rec.to_user(&mut out[n * USER_ENTRY_SIZE..(n + 1) * USER_ENTRY_SIZE]);
        n += 1;
    }
    if n > 0 {
        copyout_bytes(&out[..n * USER_ENTRY_SIZE], UserPtr(arg.records as u64))?;
    }
    let count = n as i32;
    kpi::uio::copyout(&count, nentries)
}

/// `hwt_record_td`: the record the kernel handed the hook, copied onto
/// the queue of the context tracing `pid`.
pub(crate) fn record_td(hwt: &crate::Hwt, pid: kpi::proc::Pid, rec: &kpi::hooks::HwtRecordIn<'_>) {
    let Some(kind) = HwtRecordType::from_raw(rec.record_type) else {
        return;
    };
    let record = match kind {
        HwtRecordType::Mmap | HwtRecordType::Executable | HwtRecordType::Kernel => {
            let Ok(path) = KVec::try_from_slice(rec.fullpath.unwrap_or(&[]), Wait::WaitOk) else {
                return;
            };
            Record::Object {
                kind,
                path,
                addr: rec.addr,
                baseaddr: rec.baseaddr,
            }
        }
        HwtRecordType::Munmap => Record::Munmap { addr: rec.addr },
        _ => return,
    };
    match hwt.context_lookup(pid) {
        Some(ctx) => ctx.enqueue(record),
        None => drop(record),
    }
}

const _: () = assert!(USER_ENTRY_SIZE == 1056);

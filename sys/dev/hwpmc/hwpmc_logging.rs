//! The log (hwpmc_logging.c): pmclog(3) records an owner asked for, put in
//! per-CPU buffers taken from a pool allocated at load, queued when full,
//! and written to the owner's log file by a kernel process of its own,
//! "hwpmc: proc(PID)".
//!
//! Emitting a record never sleeps or allocates, so records can be written
//! from the context-switch path. A write error stops the log: the error is
//! kept for the next PMC_OP_FLUSHLOG and the owner gets SIGIO.

use core::fmt::Write as _;

use kpi::errno::{EAGAIN, EINTR, ENOMEM, Errno, KResult};
use kpi::file::KFile;
use kpi::kproc::Kproc;
use kpi::malloc::{KArc, KBox, KVec, Wait};
use kpi::proc::{Pid, SIGIO};
use kpi::sync::{SpinMutex, SpinMutexBox, Sx, SxBox};
use uapi::pmclog::{PmclogBody, PmclogRecord};

use crate::Stats;

/// One log buffer (`struct pmclog_buffer`).
#[derive(Debug)]
pub(crate) struct LogBuffer {
    data: KVec<u8>,
    len: usize,
    /// Bytes already written out (a short or blocked write stops inside
    /// a buffer).
    sent: usize,
    /// From the shared pool (and goes back there), or a log's own buffer
    /// for its CLOSELOG record.
    pooled: bool,
}

/// The buffers of all owners, allocated at load.
#[derive(Debug)]
pub(crate) struct LogPool {
    free: SpinMutexBox<KVec<KBox<LogBuffer>>>,
    total: usize,
}

impl LogPool {
    /// `count` buffers of `size` bytes.
    pub fn new(count: usize, size: usize) -> KResult<LogPool> {
        let mut free = KVec::with_capacity(count, Wait::WaitOk)?;
        for _ in 0..count {
            let b = KBox::try_new(
                LogBuffer {
                    data: KVec::zeroed(size, Wait::WaitOk)?,
                    len: 0,
                    sent: 0,
                    pooled: true,
                },
                Wait::WaitOk,
            )?;
            let _ = free.push_within_capacity(b);
        }
        Ok(LogPool {
            free: SpinMutex::new(c"pmc-logpool", free, Wait::WaitOk)?,
            total: count,
        })
    }

    fn get(&self) -> Option<KBox<LogBuffer>> {
        self.free.lock().pop()
    }

    /// Takes a buffer back. A log's own CLOSELOG buffer is handed back to
    /// the caller, to be freed with no spin lock held.
    fn put(&self, mut b: KBox<LogBuffer>) -> Option<KBox<LogBuffer>> {
        if !b.pooled {
            return Some(b);
        }
        b.len = 0;
        b.sent = 0;
        // The pool has room for every buffer it ever handed out.
        let r = self.free.lock().push_within_capacity(b);
        kassert!(r.is_ok(), "log buffer pool over capacity");
        r.err()
    }

    /// Buffers not in use.
    pub fn available(&self) -> usize {
        self.free.lock().len()
    }
}

#[derive(Debug)]
struct LogState {
    /// The buffer each CPU is filling.
    cur: KVec<Option<KBox<LogBuffer>>>,
    /// Full or flushed buffers waiting for the writer, oldest first.
    queue: KVec<KBox<LogBuffer>>,
    /// The buffer the writer is in the middle of (a short, interrupted
    /// or blocked write), written before the queue.
    writing: Option<KBox<LogBuffer>>,
    /// The write error that stopped the log.
    error: Option<Errno>,
    /// CLOSELOG was logged; the writer closes the file once drained.
    closing: bool,
    /// The log's own buffer for its CLOSELOG record, allocated with the
    /// log, so that CLOSELOG is written even when every pool buffer is
    /// full and queued (hwpmc(4): a reader stopping at CLOSELOG loses no
    /// record).
    closelog: Option<KBox<LogBuffer>>,
}

/// An owner's log.
pub(crate) struct OwnerLog {
    owner: Pid,
    pool: KArc<LogPool>,
    stats: KArc<Stats>,
    st: SpinMutexBox<LogState>,
    /// The log file. An sx, not a mutex: the writer holds it across
    /// fo_write, which may sleep, so that deconfiguring waits for a write
    /// in progress instead of pulling the file from under it.
    file: SxBox<Option<KFile>>,
    writer: SpinMutexBox<Option<Kproc>>,
}

impl core::fmt::Debug for OwnerLog {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OwnerLog")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl OwnerLog {
    /// `pmclog_configure_log`: creates the writer process, then takes a
    /// reference to descriptor `fd` of the calling owner (EAGAIN without a
    /// process, EBADF for a descriptor not open for writing).
    pub fn configure(
        owner: Pid,
        fd: i32,
        pool: &KArc<LogPool>,
        stats: &KArc<Stats>,
        ncpu: u32,
    ) -> KResult<KArc<OwnerLog>> {
        let cur = KVec::from_fn(ncpu as usize, Wait::WaitOk, |_| None)?;
        // Every pool buffer, and the log's own CLOSELOG buffer.
        let queue = KVec::with_capacity(pool.total + 1, Wait::WaitOk)?;
        let closing_record = PmclogRecord {
            tsc: 0,
            body: PmclogBody::Closelog,
        };
        let closelog = KBox::try_new(
            LogBuffer {
                data: KVec::zeroed(closing_record.encoded_len(), Wait::WaitOk)?,
                len: 0,
                sent: 0,
                pooled: false,
            },
            Wait::WaitOk,
        )?;
        let log = KArc::try_new(
            OwnerLog {
                owner,
                pool: pool.clone(),
                stats: stats.clone(),
                st: SpinMutex::new(
                    c"pmc-ownerlog",
                    LogState {
                        cur,
                        queue,
                        writing: None,
                        error: None,
                        closing: false,
                        closelog: Some(closelog),
                    },
                    Wait::WaitOk,
                )?,
                file: Sx::new(c"pmc-logfile", None, Wait::WaitOk)?,
                writer: SpinMutex::new(c"pmc-logwriter", None, Wait::WaitOk)?,
            },
            Wait::WaitOk,
        )?;
        let body = log.clone();
        let mut name = kpi::LineBuf::<32>::new();
        let _ = write!(name, "hwpmc: proc({owner})");
        let writer = kpi::kproc::kproc_create(
            name.as_str(),
            kpi::kbox_dyn!(
                move || body.write_pass(),
                Wait::WaitOk,
                dyn Fn() + Send + Sync
            )?,
        )?;
        match kpi::file::fget_write(fd) {
            Ok(file) => *log.file.lock() = Some(file),
            Err(e) => {
                writer.stop();
                return Err(e);
            }
        }
        *log.writer.lock() = Some(writer);
        Ok(log)
    }

    /// Appends a record for the current CPU. ENOMEM when no buffer is
    /// free (the record is lost and counted) and once CLOSELOG is logged
    /// (the log takes no more records, as FreeBSD's refuses them after
    /// shutdown began); records after a write error are discarded.
    pub fn emit(&self, rec: &PmclogRecord<'_>) -> KResult<()> {
        self.append(rec, false)
    }

    /// [`Self::emit`], then hands the current CPU's buffer to the writer
    /// and wakes it (`PMCLOG_DESPATCH_SYNC`), as FreeBSD's does after the
    /// records a reader needs before the samples that follow them (the
    /// log's start, mappings, allocations, attachments and detachments,
    /// execs, and new processes and threads): a reader of a pipe sees them
    /// without waiting for the buffer to fill, whatever CPU logs next.
    pub fn emit_sync(&self, rec: &PmclogRecord<'_>) -> KResult<()> {
        self.append(rec, true)
    }

    /// [`Self::emit`] of a record of `body` stamped with the TSC now.
    pub fn log(&self, body: PmclogBody<'_>) -> KResult<()> {
        self.emit(&PmclogRecord {
            tsc: kpi::time::rdtsc(),
            body,
        })
    }

    /// [`Self::emit_sync`] of a record of `body` stamped with the TSC now.
    pub fn log_sync(&self, body: PmclogBody<'_>) -> KResult<()> {
        self.emit_sync(&PmclogRecord {
            tsc: kpi::time::rdtsc(),
            body,
        })
    }

    #[inline(always)]
    fn append(&self, rec: &PmclogRecord<'_>, sync: bool) -> KResult<()> {
        let len = rec.encoded_len();
        let cpu = kpi::cpu::curcpu() as usize;
        let mut wake = false;
        let r = {
            let mut st = self.st.lock();
            if st.closing {
                return Err(ENOMEM);
            }
            if st.error.is_some() {
                return Ok(());
            }
            let full = st.cur[cpu]
                .as_ref()
                .is_some_and(|b| b.data.len() - b.len < len);
            if full {
                if let Some(b) = st.cur[cpu].take() {
                    let _ = st.queue.push_within_capacity(b);
                    wake = true;
                }
            }
            if st.cur[cpu].is_none() {
                self.stats.buffer_requests.add(1);
                match self.pool.get() {
                    Some(b) => st.cur[cpu] = Some(b),
                    None => {
                        self.stats.buffer_requests_failed.add(1);
                    }
                }
            }
            let r = match st.cur[cpu].as_mut() {
                Some(b) => {
                    let at = b.len;
                    match rec.encode(&mut b.data[at..]) {
                        Ok(n) => {
                            b.len += n;
                            Ok(())
                        }
                        Err(_) => Err(ENOMEM),
                    }
                }
                None => Err(ENOMEM),
            };
            if sync && r.is_ok() {
                if let Some(b) = st.cur[cpu].take() {
                    let _ = st.queue.push_within_capacity(b);
                    wake = true;
                }
            }
            r
        };
        if wake {
            self.wakeup();
        }
        r
    }

    fn wakeup(&self) {
        if let Some(w) = self.writer.lock().as_ref() {
            w.wakeup();
        }
    }

    /// Queues every CPU's partly filled buffer (the caller holds the
    /// log's lock).
    fn queue_all(&self, st: &mut LogState) {
        for slot in st.cur.iter_mut() {
            match slot.take() {
                Some(b) if b.len > 0 => {
                    let r = st.queue.push_within_capacity(b);
                    kassert!(r.is_ok(), "log queue over capacity");
                }
                Some(b) => {
                    let own = self.pool.put(b);
                    kassert!(own.is_none(), "a CLOSELOG buffer filled by a CPU");
                }
                None => {}
            }
        }
    }

    /// Queues every CPU's partly filled buffer and wakes the writer.
    fn schedule_all(&self) {
        self.queue_all(&mut self.st.lock());
        self.wakeup();
    }

    /// `pmclog_flush`: the pending write error, or 0 after scheduling the
    /// buffered records for writing.
    pub fn flush(&self) -> KResult<()> {
        if let Some(e) = self.st.lock().error {
            return Err(e);
        }
        self.schedule_all();
        Ok(())
    }

    /// `pmclog_close`: a CLOSELOG record, then the writer drains the log
    /// and closes the file.
    pub fn close(&self) {
        // Every CPU's records go out before CLOSELOG, so that a reader
        // stopping at CLOSELOG loses none; CLOSELOG goes last, in the
        // log's own buffer. All of it under the log's lock, at once: a
        // record another CPU emits is either queued before CLOSELOG or
        // refused (a window between queueing the buffers and closing
        // would leave a record in a buffer nobody writes).
        let rec = PmclogRecord {
            tsc: kpi::time::rdtsc(),
            body: PmclogBody::Closelog,
        };
        {
            let mut st = self.st.lock();
            let st = &mut *st;
            if st.closing {
                return;
            }
            self.queue_all(st);
            st.closing = true;
            if let Some(mut b) = st.closelog.take() {
                let n = rec.encode(&mut b.data);
                kassert!(n.is_ok(), "the CLOSELOG buffer is too small");
                b.len = n.unwrap_or(0);
                let r = st.queue.push_within_capacity(b);
                kassert!(r.is_ok(), "log queue over capacity");
            }
        }
        self.wakeup();
    }

    /// `pmclog_deconfigure_log`: closes the log if not yet closed, stops
    /// the writer after its last pass, and returns every buffer.
    pub fn deconfigure(&self) {
        if !self.st.lock().closing {
            self.close();
        }
        let writer = self.writer.lock().take();
        if let Some(w) = writer {
            w.stop();
        }
        let mut own = None;
        let mut st = self.st.lock();
        if let Some(b) = st.writing.take() {
            own = own.or(self.pool.put(b));
        }
        while let Some(b) = st.queue.pop() {
            own = own.or(self.pool.put(b));
        }
        for slot in st.cur.iter_mut() {
            if let Some(b) = slot.take() {
                own = own.or(self.pool.put(b));
            }
        }
        let unused = st.closelog.take();
        drop(st);
        // Freed with no spin lock held.
        drop((own, unused));
        let file = self.file.lock().take();
        drop(file);
    }

    /// Whether the log still accepts records.
    pub fn is_open(&self) -> bool {
        let st = self.st.lock();
        st.error.is_none() && !st.closing
    }

    /// One pass of the writer: writes the queued buffers in order. A
    /// short write goes on with the rest, an interrupted one is retried, a
    /// blocked one (EAGAIN: the pipe is full) keeps its place for the next
    /// pass, which the file's draining starts. A write error is kept, the
    /// file dropped and the owner signalled.
    fn write_pass(&self) {
        // Interruptions in a row before giving up with EINTR.
        const MAX_INTERRUPTED: u32 = 64;
        let mut interrupted = 0;
        loop {
            let next = {
                let mut st = self.st.lock();
                match st.writing.take() {
                    Some(b) => Some(b),
                    None if !st.queue.is_empty() => Some(st.queue.remove(0)),
                    None => None,
                }
            };
            let Some(mut buf) = next else { break };
            let outcome = {
                let file = self.file.lock();
                match file.as_ref() {
                    Some(f) if self.st.lock().error.is_none() => {
                        f.write(&buf.data[buf.sent..buf.len]).map(Some)
                    }
                    // No file any more, or after an error: dropped.
                    _ => Ok(None),
                }
            };
            match outcome {
                Ok(Some(n)) if buf.sent + n < buf.len => {
                    buf.sent += n;
                    // A write that took nothing waits like a full pipe.
                    let progress = n > 0;
                    self.st.lock().writing = Some(buf);
                    if !progress {
                        break;
                    }
                }
                Ok(_) => {
                    interrupted = 0;
                    drop(self.pool.put(buf));
                }
                Err(EINTR) if interrupted < MAX_INTERRUPTED => {
                    interrupted += 1;
                    self.st.lock().writing = Some(buf);
                }
                Err(EAGAIN) => {
                    self.st.lock().writing = Some(buf);
                    break;
                }
                Err(e) => {
                    drop(self.pool.put(buf));
                    self.st.lock().error = Some(e);
                    let file = self.file.lock().take();
                    drop(file);
                    kpi::proc::psignal(self.owner, SIGIO);
                }
            }
        }
        let done = {
            let st = self.st.lock();
            st.closing && st.queue.is_empty() && st.writing.is_none()
        };
        if done {
            let file = self.file.lock().take();
            drop(file);
        }
    }
}

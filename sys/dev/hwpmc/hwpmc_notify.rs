//! Overflow notification to userland: an extension of hwpmc(4) (its
//! NOTIFICATIONS section) that FreeBSD's driver does not have.
//!
//! # Design
//!
//! A program asks, for a sampling PMC it owns, to be told every N samples
//! (or every N bytes of the PMC's CALLCHAIN records in its log) with
//! PMC_OP_EXT_NOTIFY. The operation numbers start at `PMC_OP_EXT_BASE`
//! (0x504d0000), far above FreeBSD's `enum pmc_ops`, which counts from 0,
//! so no future FreeBSD operation lands on them; PMC_OP_EXT_GETCAPS says
//! what the driver has, and a driver without the extension answers EINVAL
//! to both, as to any unknown operation. No existing structure or
//! operation changes.
//!
//! The call returns a descriptor ([`kpi::file::NotifyFile`]): readable
//! (poll, select, EVFILT_READ) while a `struct pmc_notification` waits;
//! at its end (the refresh count ran out, or the PMC was released) it
//! reports POLLHUP / EV_EOF and reads return end of file. Each
//! notification can also send a signal of the caller's choice to the
//! thread that asked, with `si_value.sival_int` the PMC id.
//!
//! The path of a notification: the PMC interrupt (an NMI on x86) records
//! the sample in its CPU's ring, as always, and takes no lock, and asks
//! for the interrupted thread's return to user mode (an AST, as for user
//! call chains); there, or at the next clock tick (hardclock's
//! PMC_FN_DO_SAMPLES) if that comes first or the CPU was running a kernel
//! thread, the ring's drain (under its spin lock) logs the sample and
//! counts it here ([`NotifyCounts::count`]); when the count is reached it
//! wakes the PMC's notification process ("hwpmc: notify(ID)"), which in
//! thread context posts the record and sends the signal
//! ([`Notifier::deliver`]). A notification therefore comes at most a clock
//! tick and a scheduling delay after the sample that completes the count,
//! and for an overflow in user mode as soon as the interrupted thread
//! returns to it, whatever the size of the log's buffers, which keep going
//! to the log writer as before (a program that wants the records at once
//! calls PMC_OP_FLUSHLOG).
//!
//! A refresh count is counted down in the interrupt itself: the overflow
//! that takes it to zero is the last sampled, and its counter is stalled
//! there; the PMC takes no sample after it (the interrupt path treats it as
//! not running), so it stops at exactly N overflows, on every CPU.
//!
//! Nothing here allocates after PMC_OP_EXT_NOTIFY: the counts are atomics
//! in the PMC, the descriptor holds one record that a post replaces, and
//! signals beyond what the kernel's signal queue takes merge. An owner
//! that never reads costs no memory and takes nothing from other PMCs.

use kpi::KResult;
use kpi::atomic::{AtomicBool, AtomicU64, Ordering};
use kpi::file::NotifyFile;
use kpi::kproc::Kproc;
use kpi::malloc::{KArc, Wait};
use kpi::proc::{Pid, Tid};
use kpi::sync::{Mutex, MutexBox, SpinMutex, SpinMutexBox};
use uapi::AsBytes;
use uapi::pmc::{PMC_NOTIFICATION_END, PmcId, PmcNotification};

use crate::Pmc;

/// The refresh count of a PMC without one.
const NO_REFRESH: u64 = u64::MAX;

/// Signals one delivery pass sends at most; the rest merge (a reader
/// learns of them from `pn_notifications`).
const MAX_SIGNALS_PER_PASS: u64 = 1024;

/// What the interrupt path does with an overflow of a PMC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overflow {
    /// Sample it, and the PMC goes on.
    Sample,
    /// Sample it; it was the last of the refresh count: stall the counter.
    Last,
    /// The refresh count ran out before: no sample.
    Exhausted,
}

/// A PMC's notification counts, read and written without a lock (the
/// interrupt path and the ring drains of several CPUs).
#[derive(Debug)]
pub(crate) struct NotifyCounts {
    /// Samples (or bytes) per notification; 0 while none is configured.
    every: AtomicU64,
    /// `every` counts log bytes.
    bytes: AtomicBool,
    /// Samples or bytes since the last notification.
    progress: AtomicU64,
    /// Overflows left before the PMC stops; [`NO_REFRESH`] without a limit.
    refresh: AtomicU64,
    /// Samples counted.
    samples: AtomicU64,
    /// Notifications made.
    notifications: AtomicU64,
    /// The CPU of the last sample counted.
    last_cpu: AtomicU64,
    /// Samples taken into a ring and not counted yet: the end waits for
    /// them.
    in_rings: AtomicU64,
}

impl Default for NotifyCounts {
    fn default() -> NotifyCounts {
        NotifyCounts {
            every: AtomicU64::new(0),
            bytes: AtomicBool::new(false),
            progress: AtomicU64::new(0),
            refresh: AtomicU64::new(NO_REFRESH),
            samples: AtomicU64::new(0),
            notifications: AtomicU64::new(0),
            last_cpu: AtomicU64::new(0),
            in_rings: AtomicU64::new(0),
        }
    }
}

impl NotifyCounts {
    /// Whether notification is configured.
    pub(crate) fn armed(&self) -> bool {
        self.every.load(Ordering::Acquire) != 0
    }

    /// Whether the refresh count ran out: the PMC takes no more samples.
    pub(crate) fn exhausted(&self) -> bool {
        self.refresh.load(Ordering::Acquire) == 0
    }

    /// Sets the configuration (before the notifier is entered).
    fn arm(&self, every: u32, bytes: bool, refresh: u32) {
        self.bytes.store(bytes, Ordering::Relaxed);
        let refresh = if refresh == 0 {
            NO_REFRESH
        } else {
            u64::from(refresh)
        };
        self.refresh.store(refresh, Ordering::Release);
        self.every.store(u64::from(every), Ordering::Release);
    }

    /// Whether every sample is counted and no more will come: the
    /// descriptor's end.
    fn all_counted(&self) -> bool {
        self.exhausted() && self.in_rings.load(Ordering::Acquire) == 0
    }

    /// The interrupt path's count of an overflow: lock-free, NMI-safe.
    /// When notification is armed, the sample it may take is counted as
    /// in a ring from here on, so that nobody sees the refresh count run
    /// out before its last sample is there: what to do, and whether it
    /// was counted so (the sample's `in_ring` for [`NotifyCounts::count`]).
    /// A PMC without notification costs the interrupt path this test only.
    #[inline]
    pub(crate) fn overflow(&self) -> (Overflow, bool) {
        // Armed last (after the refresh count): seen armed, the refresh
        // count is the one asked for.
        if !self.armed() {
            return (Overflow::Sample, false);
        }
        self.overflow_armed()
    }

    /// [`NotifyCounts::overflow`] of an armed PMC.
    // Out of line, as the other parts of the path, so that benchmarks can
    // attribute its instructions (tools/bench/run).
    #[inline(never)]
    fn overflow_armed(&self) -> (Overflow, bool) {
        self.in_rings.fetch_add(1, Ordering::AcqRel);
        let r = self.overflow_refresh();
        if r == Overflow::Exhausted {
            self.in_rings.fetch_sub(1, Ordering::AcqRel);
            return (r, false);
        }
        (r, true)
    }

    /// A sample [`NotifyCounts::overflow`] counted as in a ring was not
    /// taken (the ring was full).
    pub(crate) fn not_taken(&self, in_ring: bool) {
        if in_ring {
            self.in_rings.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn overflow_refresh(&self) -> Overflow {
        let mut left = self.refresh.load(Ordering::Acquire);
        loop {
            match left {
                NO_REFRESH => return Overflow::Sample,
                0 => return Overflow::Exhausted,
                _ => {}
            }
            match self
                .refresh
                .compare_exchange(left, left - 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if left == 1 => return Overflow::Last,
                Ok(_) => return Overflow::Sample,
                Err(now) => left = now,
            }
        }
    }

    /// A drain's count of a sample of the PMC on `cpu` that took
    /// `log_bytes` of its log (0 when it was not logged); `in_ring` when
    /// the interrupt counted it as in a ring. True when it completes a
    /// notification. Spin-lock context.
    #[inline(never)]
    pub(crate) fn count(&self, cpu: u32, log_bytes: usize, in_ring: bool) -> bool {
        // Samples taken before notification was armed do not count.
        if !in_ring {
            return false;
        }
        self.in_rings.fetch_sub(1, Ordering::AcqRel);
        self.samples.fetch_add(1, Ordering::Relaxed);
        self.last_cpu.store(u64::from(cpu), Ordering::Relaxed);
        let every = self.every.load(Ordering::Acquire);
        let step = if self.bytes.load(Ordering::Relaxed) {
            log_bytes as u64
        } else {
            1
        };
        if step == 0 || every == 0 {
            return false;
        }
        // The drains of several CPUs may count at once: each takes the
        // notifications its step completes, and leaves the remainder.
        let mut cur = self.progress.load(Ordering::Acquire);
        let made = loop {
            let total = cur.saturating_add(step);
            match self.progress.compare_exchange(
                cur,
                total % every,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break total / every,
                Err(now) => cur = now,
            }
        };
        if made == 0 {
            return false;
        }
        self.notifications.fetch_add(made, Ordering::AcqRel);
        true
    }
}

/// The part of a PMC's notification that lives in thread context: the
/// descriptor, the process that posts to it, and whom to signal.
pub(crate) struct Notifier {
    pmcid: PmcId,
    pid: Pid,
    tid: Tid,
    signo: i32,
    /// The descriptor's file. A sleep mutex: a post takes the file's own
    /// (sleep) mutex.
    file: MutexBox<Option<NotifyFile>>,
    /// The process that delivers ("hwpmc: notify(ID)").
    kproc: SpinMutexBox<Option<Kproc>>,
    /// Notifications delivered (by the process alone).
    delivered: AtomicU64,
    /// The PMC was released: the next pass ends the descriptor.
    released: AtomicBool,
    /// The descriptor was ended.
    ended: AtomicBool,
}

impl core::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Notifier")
            .field("pmcid", &self.pmcid)
            .field("signo", &self.signo)
            .finish_non_exhaustive()
    }
}

/// What PMC_OP_EXT_NOTIFY asked for, validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NotifyRequest {
    pub(crate) every: u32,
    pub(crate) bytes: bool,
    pub(crate) refresh: u32,
    pub(crate) signo: i32,
}

impl Notifier {
    /// Sets up notification on `pm` for the calling thread: its process,
    /// then its descriptor (the last step, since a descriptor once
    /// installed cannot be taken back here). The descriptor's number.
    /// Thread context; sleeps.
    pub(crate) fn configure(pm: &KArc<Pmc>, req: NotifyRequest) -> KResult<i32> {
        let notifier = KArc::try_new(
            Notifier {
                pmcid: pm.id,
                pid: kpi::proc::curproc(),
                tid: kpi::proc::curthread(),
                signo: req.signo,
                file: Mutex::new(c"pmc-notify", None, Wait::WaitOk)?,
                kproc: SpinMutex::new(c"pmc-notifyproc", None, Wait::WaitOk)?,
                delivered: AtomicU64::new(0),
                released: AtomicBool::new(false),
                ended: AtomicBool::new(false),
            },
            Wait::WaitOk,
        )?;
        let body = (pm.clone(), notifier.clone());
        let mut name = kpi::LineBuf::<32>::new();
        let _ = core::fmt::Write::write_fmt(&mut name, format_args!("hwpmc: notify({:#x})", pm.id));
        let kproc = kpi::kproc::kproc_create(
            name.as_str(),
            kpi::kbox_dyn!(
                move || body.1.deliver(&body.0),
                Wait::WaitOk,
                dyn Fn() + Send + Sync
            )?,
        )?;
        let (file, fd) = match kpi::file::notify_file_create(size_of::<PmcNotification>()) {
            Ok(f) => f,
            Err(e) => {
                kproc.stop();
                return Err(e);
            }
        };
        *notifier.file.lock() = Some(file);
        *notifier.kproc.lock() = Some(kproc);
        pm.notify.arm(req.every, req.bytes, req.refresh);
        let old = pm.notifier.lock().replace(notifier);
        kassert!(old.is_none(), "PMC {:#x} notified twice", pm.id);
        Ok(fd)
    }

    /// Wakes the delivering process. Any context but NMI (a spin lock is
    /// taken).
    #[inline(never)]
    pub(crate) fn wake(&self) {
        if let Some(k) = self.kproc.lock().as_ref() {
            k.wakeup();
        }
    }

    /// One pass of the delivering process: posts the counts when there is
    /// a new notification or the end, and signals the thread once per new
    /// notification.
    fn deliver(&self, pm: &Pmc) {
        let made = pm.notify.notifications.load(Ordering::Acquire);
        let before = self.delivered.swap(made, Ordering::AcqRel);
        let end = pm.notify.all_counted() || self.released.load(Ordering::Acquire);
        let ending = end && !self.ended.load(Ordering::Acquire);
        if made == before && !ending {
            return;
        }
        let record = PmcNotification {
            pn_pmcid: self.pmcid,
            pn_flags: if end { PMC_NOTIFICATION_END } else { 0 },
            pn_cpu: pm.notify.last_cpu.load(Ordering::Relaxed) as u32,
            pn_spare: 0,
            pn_notifications: made,
            pn_samples: pm.notify.samples.load(Ordering::Relaxed),
            pn_dropped: pm.dropped_total.load(Ordering::Relaxed),
        };
        {
            let file = self.file.lock();
            if let Some(f) = file.as_ref() {
                f.post(record.as_bytes());
                if ending {
                    f.hangup();
                }
            }
        }
        if ending {
            self.ended.store(true, Ordering::Release);
        }
        if self.signo != 0 {
            for _ in 0..(made - before).min(MAX_SIGNALS_PER_PASS) {
                if !kpi::proc::tdsignal(self.pid, self.tid, self.signo, self.pmcid as i32) {
                    break;
                }
            }
        }
    }

    /// The PMC is released: a last pass ends the descriptor, and the
    /// process exits. Thread context.
    pub(crate) fn finish(&self) {
        self.released.store(true, Ordering::Release);
        let kproc = self.kproc.lock().take();
        if let Some(k) = kproc {
            k.stop();
        }
        let file = self.file.lock().take();
        drop(file);
    }
}

//! Tracing contexts (hwt_context.c): what one ALLOC made, its ident, its
//! threads or CPUs with their buffers, its state, configuration and
//! record queue.

use kpi::KResult;
use kpi::cdev::PageObject;
use kpi::errno::ENOMEM;
use kpi::malloc::{KArc, KVec, Wait};
use kpi::proc::{Pid, Tid};
use kpi::sync::{SpinMutex, SpinMutexBox};
use uapi::hwt::HWT_MODE_CPU;

use crate::Hwt;
use crate::hwt_backend::{Backend, BufId};
use crate::hwt_cpu::HwtCpu;
use crate::hwt_record::{RecordQueue, RecordSink, Records};
use crate::hwt_thread::HwtThread;

/// How many idents there are (`1 << 8`).
pub(crate) const IDENT_COUNT: usize = 256;

/// The ident bitmap: lowest free first.
#[derive(Debug, Default)]
pub(crate) struct IdentSet([u64; IDENT_COUNT / 64]);

impl Hwt {
    /// `hwt_ctx_ident_alloc`: ENOMEM when all are taken.
    pub(crate) fn ident_alloc(&self) -> KResult<i32> {
        let mut set = self.idents.lock();
        for (w, word) in set.0.iter_mut().enumerate() {
            if *word != u64::MAX {
                let bit = word.trailing_ones() as usize;
                *word |= 1 << bit;
                return Ok((w * 64 + bit) as i32);
            }
        }
        Err(ENOMEM)
    }

    /// `hwt_ctx_ident_free`.
    pub(crate) fn ident_free(&self, ident: i32) {
        let i = ident as usize;
        self.idents.lock().0[i / 64] &= !(1 << (i % 64));
    }
}

/// `enum hwt_ctx_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CtxState {
    /// CTX_STATE_STOPPED.
    Stopped,
    /// CTX_STATE_RUNNING.
    Running,
    /// Being torn down: no hook acts on it any more.
    Dying,
}

/// A CPU set as the kernel keeps it (`cpuset_t`, 1024 CPUs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuMap(pub(crate) [u64; 16]);

/// The kernel's `sizeof(cpuset_t)`.
pub(crate) const CPUSET_BYTES: usize = 128;

impl CpuMap {
    /// The set in `bytes` (fewer bytes leave the rest empty).
    pub(crate) fn from_bytes(bytes: &[u8]) -> CpuMap {
        let mut map = CpuMap::default();
        for (i, chunk) in bytes.chunks(8).take(16).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            map.0[i] = u64::from_ne_bytes(word);
        }
        map
    }
    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        (cpu as usize) < 1024 && self.0[cpu as usize / 64] & (1 << (cpu % 64)) != 0
    }
    /// The CPUs of the set, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..1024u32).filter(|&c| self.contains(c))
    }
}

/// What the context's spin lock ("ctx") guards.
#[derive(Debug)]
pub(crate) struct CtxLocked {
    pub(crate) state: CtxState,
    /// Thread mode: the traced threads, in creation order.
    pub(crate) threads: KVec<KArc<HwtThread>>,
    pub(crate) thread_counter: i32,
    pub(crate) pause_on_mmap: bool,
    /// The backend's configuration blob (SET_CONFIG), and its version.
    pub(crate) config: Option<KVec<u8>>,
    pub(crate) config_version: i32,
}

/// A tracing context (`struct hwt_context`), as backends see it.
#[derive(Debug)]
pub struct HwtContext {
    pub(crate) ident: i32,
    pub(crate) mode: i32,
    /// Thread mode: the traced process.
    pub(crate) pid: Pid,
    /// The process that allocated it.
    pub(crate) owner: Pid,
    /// The thread that allocated it (`hwt_td`).
    pub(crate) owner_td: Tid,
    pub(crate) bufsize: usize,
    pub(crate) kqueue_fd: i32,
    pub(crate) cpu_map: CpuMap,
    /// CPU mode: one per CPU of the set, fixed once allocated.
    pub(crate) cpus: KVec<HwtCpu>,
    pub(crate) backend: KArc<Backend>,
    pub(crate) locked: SpinMutexBox<CtxLocked>,
    /// The records userland has not read ("ctx_rec"), shared with the
    /// backend's record sinks.
    pub(crate) records: KArc<Records>,
}

impl HwtContext {
    /// `hwt_ctx_alloc` with what ALLOC knows; the ident is taken here.
    pub(crate) fn alloc(
        hwt: &Hwt,
        mode: i32,
        pid: Pid,
        bufsize: usize,
        kqueue_fd: i32,
        cpu_map: CpuMap,
        backend: KArc<Backend>,
    ) -> KResult<HwtContext> {
        let locked = SpinMutex::new(
            c"ctx",
            CtxLocked {
                state: CtxState::Stopped,
                threads: KVec::new(),
                thread_counter: 0,
                pause_on_mmap: false,
                config: None,
                config_version: 0,
            },
            Wait::WaitOk,
        )?;
        let records = KArc::try_new(
            Records {
                queue: kpi::sync::Mutex::new(c"ctx_rec", RecordQueue::default(), Wait::WaitOk)?,
            },
            Wait::WaitOk,
        )?;
        let ident = hwt.ident_alloc()?;
        Ok(HwtContext {
            ident,
            mode,
            pid,
            owner: kpi::proc::curproc(),
            owner_td: kpi::proc::curthread(),
            bufsize,
            kqueue_fd,
            cpu_map,
            cpus: KVec::new(),
            backend,
            locked,
            records,
        })
    }

    /// The context's ident (`ctx->ident`).
    pub fn ident(&self) -> i32 {
        self.ident
    }
    /// HWT_MODE_THREAD or HWT_MODE_CPU.
    pub fn mode(&self) -> i32 {
        self.mode
    }
    /// Whether it traces CPUs.
    pub fn cpu_mode(&self) -> bool {
        self.mode == HWT_MODE_CPU
    }
    /// Thread mode: the traced process.
    pub fn pid(&self) -> Pid {
        self.pid
    }
    /// The size of each buffer.
    pub fn bufsize(&self) -> usize {
        self.bufsize
    }
    /// The kqueue given at ALLOC (SPE posts its events there).
    pub fn kqueue_fd(&self) -> i32 {
        self.kqueue_fd
    }
    /// The process that allocated the context.
    pub fn owner(&self) -> Pid {
        self.owner
    }
    /// The thread that allocated the context.
    pub fn owner_thread(&self) -> Tid {
        self.owner_td
    }
    /// CPU mode: the traced CPUs.
    pub fn cpu_map(&self) -> &CpuMap {
        &self.cpu_map
    }
    /// The configuration userland set (SET_CONFIG) and its version, seen
    /// under the context's spin lock: `f` may not allocate or sleep.
    pub fn with_config<R>(&self, f: impl FnOnce(Option<(&[u8], i32)>) -> R) -> R {
        let l = self.locked.lock();
        f(l.config.as_deref().map(|c| (c, l.config_version)))
    }
    /// The pages of buffer `buf`, if it exists.
    pub fn pages(&self, buf: BufId) -> Option<PageObject> {
        match buf {
            BufId::Cpu(cpu) => self
                .cpus
                .iter()
                .find(|c| c.cpu_id == cpu)
                .map(|c| c.vm.pages.clone()),
            BufId::Thread(id) => {
                let l = self.locked.lock();
                l.threads
                    .iter()
                    .find(|t| t.thread_id == id)
                    .map(|t| t.vm.pages.clone())
            }
        }
    }
    /// Where the backend queues its BUFFER records, from thread context,
    /// for as long as it keeps the sink (it does not keep the context).
    pub fn record_sink(&self) -> RecordSink {
        RecordSink(self.records.clone())
    }

    /// The state now.
    pub(crate) fn state(&self) -> CtxState {
        self.locked.lock().state
    }

    /// The thread of `tid`, if traced (`hwt_thread_lookup`).
    pub(crate) fn thread_lookup(&self, tid: Tid) -> Option<KArc<HwtThread>> {
        let l = self.locked.lock();
        l.threads.iter().find(|t| t.tid == tid).cloned()
    }

    /// The thread of `thread_id`.
    pub(crate) fn thread_by_id(&self, thread_id: i32) -> Option<KArc<HwtThread>> {
        let l = self.locked.lock();
        l.threads.iter().find(|t| t.thread_id == thread_id).cloned()
    }

    /// The next thread id (`atomic_fetchadd_int(&thread_counter, 1)`).
    pub(crate) fn next_thread_id(&self) -> i32 {
        let mut l = self.locked.lock();
        let id = l.thread_counter;
        l.thread_counter += 1;
        id
    }

    /// `hwt_thread_insert`: adds `thr` to the list under the spin lock;
    /// the list grows outside it (no allocation under a spin lock).
    pub(crate) fn thread_insert(&self, thr: KArc<HwtThread>) -> KResult<()> {
        loop {
            let need = {
                let mut l = self.locked.lock();
                if l.threads.spare_capacity() > 0 {
                    let _ = l.threads.push_within_capacity(thr);
                    return Ok(());
                }
                l.threads.len() * 2 + 1
            };
            let mut bigger = KVec::with_capacity(need, Wait::WaitOk)?;
            let old = {
                let mut l = self.locked.lock();
                if l.threads.spare_capacity() > 0 {
                    // Another insert grew it meanwhile.
                    None
                } else if bigger.capacity() > l.threads.len() {
                    while let Some(t) = l.threads.pop() {
                        let _ = bigger.push_within_capacity(t);
                    }
                    bigger.reverse();
                    Some(core::mem::replace(&mut l.threads, bigger))
                } else {
                    None
                }
            };
            // The old list (now empty) is freed after the lock is gone.
            drop(old);
        }
    }

    /// Stops tracing wherever the context traces (STOP of a backend
    /// without a stop operation, and teardown): each CPU of a CPU-mode
    /// context; in thread mode, the units that run its threads now.
    pub(crate) fn disable_everywhere(&self, backend: &Backend) {
        if self.cpu_mode() {
            if backend.has_smp() {
                let _ = backend.ops.disable_smp(self);
            } else {
                for cpu in self.cpus.iter() {
                    let _bind = kpi::cpu::bind(cpu.cpu_id);
                    backend.ops.disable(self, cpu.cpu_id);
                }
            }
        } else {
            // Threads on a CPU now: the unit of that CPU stops there (on
            // FreeBSD the binding moves this thread to the CPU, and the
            // traced thread is off it by then or switched out under it).
            let running: KVec<KArc<HwtThread>> = {
                let n = self.locked.lock().threads.len();
                let mut v = match KVec::with_capacity(n, Wait::WaitOk) {
                    Ok(v) => v,
                    Err(_) => return,
                };
                let l = self.locked.lock();
                for t in l.threads.iter() {
                    if t.active_cpu().is_some() && v.spare_capacity() > 0 {
                        let _ = v.push_within_capacity(t.clone());
                    }
                }
                v
            };
            for t in running.iter() {
                let Some(cpu) = t.active_cpu() else { continue };
                let _bind = kpi::cpu::bind(cpu);
                let _crit = kpi::sync::CriticalSection::enter();
                if t.active_on(cpu) {
                    backend.ops.disable(self, cpu);
                    t.set_active(None);
                }
            }
        }
    }
}

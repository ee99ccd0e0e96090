//! The backend registry (hwt_backend.c): trace units register under a
//! name ("pt", "spe", "coresight"); a context calls its backend through
//! the wrappers here, which call an optional operation only when the
//! backend declares it (FreeBSD calls stop and svc_buf unchecked, and its
//! PT backend has neither).

use kpi::KResult;
use kpi::cdev::PageObject;
use kpi::errno::{EEXIST, EOPNOTSUPP};
use kpi::malloc::{KArc, KBox, Wait};

use crate::Hwt;
use crate::hwt_context::HwtContext;

bitflags::bitflags! {
    /// The optional operations a backend implements.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct BackendOps: u32 {
        /// [`HwtBackend::stop`].
        const STOP = 1 << 0;
        /// [`HwtBackend::svc_buf`].
        const SVC_BUF = 1 << 1;
        /// [`HwtBackend::enable_smp`] and [`HwtBackend::disable_smp`].
        const SMP = 1 << 2;
        /// [`HwtBackend::thread_alloc`] and [`HwtBackend::thread_free`].
        const THREAD_DATA = 1 << 3;
        /// [`HwtBackend::dump`].
        const DUMP = 1 << 4;
    }
}

/// What the BUFPTR_GET ioctl reports: the backend's position in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufPtr {
    /// `ident`: for PT, the whole pages written; for SPE the buffer's id.
    pub ident: i32,
    /// `offset`: bytes into that page (PT) or half (SPE).
    pub offset: u64,
    /// `data`: backend flags (SPE).
    pub data: u64,
}

/// Which trace buffer an operation concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufId {
    /// A CPU's (CPU mode).
    Cpu(u32),
    /// A thread's, by its thread id (thread mode).
    Thread(i32),
}

/// A trace unit's driver (`struct hwt_backend_ops`). The required
/// operations come first; an optional one is called only when
/// [`HwtBackend::ops`] has its bit.
pub trait HwtBackend: Send + Sync {
    /// The optional operations implemented.
    fn ops(&self) -> BackendOps;
    /// `hwt_backend_init`: a context was allocated.
    fn init(&self, ctx: &HwtContext) -> KResult<()>;
    /// `hwt_backend_deinit`: the context is being freed.
    fn deinit(&self, ctx: &HwtContext);
    /// `hwt_backend_configure`: program the unit of `cpu_id` for the
    /// buffer `buf` (at START in CPU mode, at each switch-in in thread
    /// mode; then in a critical section).
    fn configure(&self, ctx: &HwtContext, cpu_id: u32, buf: BufId) -> KResult<()>;
    /// `hwt_backend_enable`: start tracing on `cpu_id` (the current CPU).
    fn enable(&self, ctx: &HwtContext, cpu_id: u32);
    /// `hwt_backend_disable`: stop tracing on `cpu_id` (the current CPU).
    fn disable(&self, ctx: &HwtContext, cpu_id: u32);
    /// `hwt_backend_read`: where the unit is in buffer `buf`.
    fn read(&self, ctx: &HwtContext, buf: BufId) -> KResult<BufPtr>;

    /// STOP: stop tracing everywhere for `ctx`.
    fn stop(&self, ctx: &HwtContext) -> KResult<()> {
        let _ = ctx;
        Err(EOPNOTSUPP)
    }
    /// SVC_BUF: userland is done with a buffer (SPE).
    fn svc_buf(&self, ctx: &HwtContext, data: &[u8], version: i32) -> KResult<()> {
        let _ = (ctx, data, version);
        Err(EOPNOTSUPP)
    }
    /// Start every CPU of a CPU-mode context at once.
    fn enable_smp(&self, ctx: &HwtContext) -> KResult<()> {
        let _ = ctx;
        Err(EOPNOTSUPP)
    }
    /// Stop every CPU of a CPU-mode context at once.
    fn disable_smp(&self, ctx: &HwtContext) -> KResult<()> {
        let _ = ctx;
        Err(EOPNOTSUPP)
    }
    /// Per-thread data for thread `thread_id` of `ctx`, whose buffer's
    /// pages are `pages` (FreeBSD's backends get the thread, with its
    /// `vm`): a thread the traced process creates later is not yet in the
    /// context when this runs.
    fn thread_alloc(&self, ctx: &HwtContext, thread_id: i32, pages: &PageObject) -> KResult<()> {
        let _ = (ctx, thread_id, pages);
        Ok(())
    }
    /// Frees what [`HwtBackend::thread_alloc`] made.
    fn thread_free(&self, ctx: &HwtContext, thread_id: i32) {
        let _ = (ctx, thread_id);
    }
    /// Debugging output of a CPU's unit.
    fn dump(&self, cpu_id: u32) {
        let _ = cpu_id;
    }
}

/// A registered backend (`struct hwt_backend`).
pub(crate) struct Backend {
    pub(crate) name: &'static str,
    /// The buffers need a kernel mapping (`kva_req`).
    pub(crate) kva_req: bool,
    pub(crate) ops: KBox<dyn HwtBackend>,
}

impl core::fmt::Debug for Backend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.name)
            .field("kva_req", &self.kva_req)
            .finish()
    }
}

/// Keeps a backend registered; dropping it unregisters
/// (`hwt_backend_unregister`).
#[derive(Debug)]
pub struct BackendTag {
    hwt: KArc<Hwt>,
    backend: KArc<Backend>,
}

impl Drop for BackendTag {
    fn drop(&mut self) {
        let mut list = self.hwt.backends.lock();
        list.retain(|b| !KArc::ptr_eq(b, &self.backend));
    }
}

impl Hwt {
    /// `hwt_backend_register`: EEXIST when the name is taken.
    pub(crate) fn backend_register(
        this: &KArc<Self>,
        name: &'static str,
        kva_req: bool,
        ops: KBox<dyn HwtBackend>,
    ) -> KResult<BackendTag> {
        let backend = KArc::try_new(Backend { name, kva_req, ops }, Wait::WaitOk)?;
        let mut list = this.backends.lock();
        if list.iter().any(|b| b.name == name) {
            return Err(EEXIST);
        }
        list.try_push(backend.clone(), Wait::NoWait)?;
        drop(list);
        Ok(BackendTag {
            hwt: this.clone(),
            backend,
        })
    }

    /// `hwt_backend_lookup`.
    pub(crate) fn backend_lookup(&self, name: &[u8]) -> Option<KArc<Backend>> {
        let list = self.backends.lock();
        list.iter().find(|b| b.name.as_bytes() == name).cloned()
    }
}

/// The calls of a context into its backend, each optional one checked.
impl Backend {
    pub(crate) fn stop(&self, ctx: &HwtContext) -> KResult<()> {
        if self.ops.ops().contains(BackendOps::STOP) {
            return self.ops.stop(ctx);
        }
        // Without a stop operation, stopping is disabling the unit of
        // every CPU that traces for the context.
        ctx.disable_everywhere(self);
        Ok(())
    }

    pub(crate) fn svc_buf(&self, ctx: &HwtContext, data: &[u8], version: i32) -> KResult<()> {
        if self.ops.ops().contains(BackendOps::SVC_BUF) {
            self.ops.svc_buf(ctx, data, version)
        } else {
            Err(EOPNOTSUPP)
        }
    }

    pub(crate) fn has_smp(&self) -> bool {
        self.ops.ops().contains(BackendOps::SMP)
    }

    pub(crate) fn thread_alloc(
        &self,
        ctx: &HwtContext,
        thread_id: i32,
        pages: &PageObject,
    ) -> KResult<()> {
        if self.ops.ops().contains(BackendOps::THREAD_DATA) {
            self.ops.thread_alloc(ctx, thread_id, pages)
        } else {
            Ok(())
        }
    }

    pub(crate) fn thread_free(&self, ctx: &HwtContext, thread_id: i32) {
        if self.ops.ops().contains(BackendOps::THREAD_DATA) {
            self.ops.thread_free(ctx, thread_id);
        }
    }
}

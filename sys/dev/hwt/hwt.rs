//! hwt(4): the hardware trace framework.
//!
//! Module glue (hwt.c): loading creates `/dev/hwt`, whose only ioctl is
//! HWT_IOC_ALLOC, registers the process_exit handler that tears down the
//! contexts of an owner that exits, and installs the hook the scheduler,
//! exec, mmap and the thread code call. Backends (trace units) register
//! through [`Module::register_backend`].
//!
//! Where this differs from FreeBSD 15.0's C framework (each a choice for
//! what hwt(4) promises over what its code does):
//! - STOP and SVC_BUF call a backend operation only if the backend has it
//!   (FreeBSD calls both unchecked, and its PT backend has neither); STOP
//!   without one disables the unit wherever the context traces, SVC_BUF
//!   without one is EOPNOTSUPP.
//! - MUNMAP records carry the unmapped address to userland.
//! - A thread-mode context's devices are named after the traced process,
//!   as hwt(4) says: `hwt_<ident>_<pid>` for its first thread and
//!   `hwt_<ident>_<pid>_<thread id>` for the others (FreeBSD uses the
//!   thread index alone).
//! - Unloading tears down every context, as their owners' exit would.
//! - A CPU-mode set naming a CPU that does not exist is refused (ENXIO),
//!   as a halted one is.
#![no_std]

extern crate alloc;

mod hwt_backend;
mod hwt_config;
mod hwt_context;
mod hwt_contexthash;
mod hwt_cpu;
mod hwt_hook;
mod hwt_ioctl;
mod hwt_owner;
mod hwt_ownerhash;
mod hwt_record;
mod hwt_thread;
mod hwt_vm;

pub use hwt_backend::{BackendOps, BackendTag, BufId, BufPtr, HwtBackend};
pub use hwt_context::{CpuMap, HwtContext};
pub use hwt_record::RecordSink;

use kpi::KResult;
use kpi::cdev::{Cdev, CdevSw, GID_WHEEL, UID_ROOT};
use kpi::hooks::{EventTag, KernelEvent};
use kpi::malloc::{KArc, KBox, KVec, Wait};
use kpi::sync::{MutexBox, SpinMutexBox};

/// The framework's state, shared by its devices, hooks and handlers.
#[derive(Debug)]
pub(crate) struct Hwt {
    /// Registered backends ("hwt backend", a default mutex).
    pub(crate) backends: MutexBox<KVec<KArc<hwt_backend::Backend>>>,
    /// Context idents in use ("ident set").
    pub(crate) idents: MutexBox<hwt_context::IdentSet>,
    /// Traced processes' contexts (thread mode), a spin lock: the
    /// scheduler's hooks look them up.
    pub(crate) contexts: SpinMutexBox<hwt_contexthash::ContextHash>,
    /// Owners, the processes that allocated contexts.
    pub(crate) owners: MutexBox<hwt_ownerhash::OwnerHash>,
}

impl Hwt {
    fn new() -> KResult<Hwt> {
        Ok(Hwt {
            backends: kpi::sync::Mutex::new(c"hwt backend", KVec::new(), Wait::WaitOk)?,
            idents: kpi::sync::Mutex::new(
                c"ident set",
                hwt_context::IdentSet::default(),
                Wait::WaitOk,
            )?,
            contexts: kpi::sync::SpinMutex::new(
                c"hwt ctx hash",
                hwt_contexthash::ContextHash::default(),
                Wait::WaitOk,
            )?,
            owners: kpi::sync::Mutex::new(
                c"hwt owner hash",
                hwt_ownerhash::OwnerHash::default(),
                Wait::WaitOk,
            )?,
        })
    }
}

/// `/dev/hwt`.
struct ControlDev(KArc<Hwt>);

impl CdevSw for ControlDev {
    fn ioctl(&self, cmd: u32, data: &mut [u8]) -> KResult<()> {
        hwt_ioctl::hwt_ioctl(&self.0, cmd, data)
    }
}

/// The loaded framework; dropping it unloads (MOD_UNLOAD).
#[derive(Debug)]
pub struct Module {
    hwt: KArc<Hwt>,
    dev: Option<Cdev>,
    exit_tag: Option<EventTag>,
}

impl Module {
    /// MOD_LOAD: `/dev/hwt` (root:wheel 0660), the process_exit handler
    /// and the hook.
    pub fn load() -> KResult<Module> {
        let hwt = KArc::try_new(Hwt::new()?, Wait::WaitOk)?;
        let sw = kpi::kbox_dyn!(ControlDev(hwt.clone()), Wait::WaitOk, dyn CdevSw)?;
        let dev = kpi::cdev::make_dev("hwt", UID_ROOT, GID_WHEEL, 0o660, sw)?;
        let on_exit = hwt.clone();
        let handler = kpi::kbox_dyn!(
            move |ev: &KernelEvent| {
                if let KernelEvent::ProcessExit { pid } = *ev {
                    hwt_owner::process_exit(&on_exit, pid);
                }
            },
            Wait::WaitOk,
            dyn Fn(&KernelEvent) + Send + Sync
        )?;
        let exit_tag = kpi::hooks::eventhandler_register(handler)?;
        hwt_hook::hook_load(&hwt)?;
        Ok(Module {
            hwt,
            dev: Some(dev),
            exit_tag: Some(exit_tag),
        })
    }

    /// `hwt_backend_register`: trace unit `name` served by `ops`;
    /// `kva_req` when its buffers need a kernel mapping. EEXIST when the
    /// name is taken. The backend stays until the tag is dropped.
    pub fn register_backend(
        &self,
        name: &'static str,
        kva_req: bool,
        ops: KBox<dyn HwtBackend>,
    ) -> KResult<BackendTag> {
        Hwt::backend_register(&self.hwt, name, kva_req, ops)
    }

    /// The number of contexts alive (for tests and sysctl-like checks).
    pub fn contexts(&self) -> usize {
        self.hwt.owners.lock().contexts()
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        hwt_hook::hook_unload();
        self.exit_tag.take();
        self.dev.take();
        // Contexts whose owners still run go with the module.
        hwt_owner::shutdown_all(&self.hwt);
    }
}

//! Trace buffers and the per-context devices (hwt_vm.c): each thread or
//! CPU of a context has a buffer of wired pages and a device that maps it
//! read-only and takes the context's ioctls (START, STOP, RECORD_GET,
//! BUFPTR_GET, SET_CONFIG, WAKEUP, SVC_BUF).

use kpi::KResult;
use kpi::cdev::{Cdev, CdevSw, GID_WHEEL, PROT_READ, PageObject, UID_ROOT};
use kpi::errno::{EINVAL, ENXIO, EPERM};
use kpi::malloc::{KArc, Wait};
use kpi::uio::{UserPtr, copyin_bytes, copyout};
use uapi::Plain;
use uapi::hwt::*;

use crate::Hwt;
use crate::hwt_backend::BufId;
use crate::hwt_context::{CtxState, HwtContext};

/// The largest SVC_BUF argument (a page).
const HWT_MAXSVCSIZE: usize = kpi::cdev::PAGE_SIZE;

/// A buffer and its device (`struct hwt_vm`).
#[derive(Debug)]
pub(crate) struct HwtVm {
    pub(crate) pages: PageObject,
    /// Destroyed with the buffer (`destroy_dev_sched`).
    _cdev: Cdev,
}

impl HwtVm {
    /// `hwt_vm_alloc`: `bufsize` bytes of pages and the device `name`,
    /// through which the context `ident` of the owner is reached.
    pub(crate) fn alloc(
        hwt: &KArc<Hwt>,
        ident: i32,
        buf: BufId,
        bufsize: usize,
        name: &str,
    ) -> KResult<HwtVm> {
        let pages = PageObject::alloc(bufsize / kpi::cdev::PAGE_SIZE, Wait::WaitOk)?;
        let sw = kpi::kbox_dyn!(
            VmDev {
                hwt: hwt.clone(),
                ident,
                buf,
                pages: pages.clone(),
            },
            Wait::WaitOk,
            dyn CdevSw
        )?;
        let cdev = kpi::cdev::make_dev(name, UID_ROOT, GID_WHEEL, 0o660, sw)?;
        Ok(HwtVm { pages, _cdev: cdev })
    }
}

/// A buffer's device. It names its context by ident and finds it through
/// the caller's owner record, as FreeBSD checks the caller: ENXIO for a
/// process that owns no context, EPERM for another owner's.
struct VmDev {
    hwt: KArc<Hwt>,
    ident: i32,
    buf: BufId,
    pages: PageObject,
}

impl CdevSw for VmDev {
    fn ioctl(&self, cmd: u32, data: &mut [u8]) -> KResult<()> {
        let caller = kpi::proc::curproc();
        let owner = self.hwt.owner_lookup(caller).ok_or(ENXIO)?;
        let ctx = owner.ctx_by_ident(self.ident).ok_or(EPERM)?;
        vm_ioctl(&ctx, self.buf, cmd, data)
    }

    fn mmap_single(&self, offset: u64, _size: u64, prot: i32) -> KResult<PageObject> {
        if prot != PROT_READ || offset != 0 {
            return Err(ENXIO);
        }
        Ok(self.pages.clone())
    }
}

/// `hwt_vm_ioctl` once the caller is known to own `ctx`. Unknown
/// commands succeed, as in FreeBSD.
fn vm_ioctl(ctx: &KArc<HwtContext>, buf: BufId, cmd: u32, data: &mut [u8]) -> KResult<()> {
    match cmd {
        HWT_IOC_START => start(ctx),
        HWT_IOC_STOP => {
            {
                let mut l = ctx.locked.lock();
                if l.state != CtxState::Running {
                    return Err(ENXIO);
                }
                l.state = CtxState::Stopped;
            }
            ctx.backend.stop(ctx)
        }
        HWT_IOC_RECORD_GET => {
            let arg = HwtRecordGet::read_from(data).ok_or(EINVAL)?;
            crate::hwt_record::record_send(ctx, &arg)
        }
        HWT_IOC_SET_CONFIG => {
            if ctx.state() == CtxState::Running {
                return Err(ENXIO);
            }
            let arg = HwtSetConfig::read_from(data).ok_or(EINVAL)?;
            crate::hwt_config::config_set(ctx, &arg)?;
            ctx.locked.lock().pause_on_mmap = arg.pause_on_mmap != 0;
            Ok(())
        }
        HWT_IOC_WAKEUP => {
            if ctx.cpu_mode() {
                return Err(ENXIO);
            }
            // The thread that owns this device, paused in the exec or
            // mmap hook.
            if let BufId::Thread(id) = buf {
                if let Some(thr) = ctx.thread_by_id(id) {
                    thr.wakeup();
                }
            }
            Ok(())
        }
        HWT_IOC_BUFPTR_GET => {
            let arg = HwtBufptrGet::read_from(data).ok_or(EINVAL)?;
            let ptr = ctx.backend.ops.read(ctx, buf)?;
            if !arg.ident.is_null() {
                copyout(&ptr.ident, UserPtr(arg.ident as u64))?;
            }
            if !arg.offset.is_null() {
                copyout(&ptr.offset, UserPtr(arg.offset as u64))?;
            }
            if !arg.data.is_null() {
                copyout(&ptr.data, UserPtr(arg.data as u64))?;
            }
            Ok(())
        }
        HWT_IOC_SVC_BUF => {
            if ctx.state() != CtxState::Running {
                return Err(ENXIO);
            }
            let arg = HwtSvcBuf::read_from(data).ok_or(EINVAL)?;
            if arg.data_size == 0 || arg.data_size > HWT_MAXSVCSIZE {
                return Err(EINVAL);
            }
            let bytes = copyin_bytes(UserPtr(arg.data as u64), arg.data_size, Wait::WaitOk)?;
            ctx.backend.svc_buf(ctx, &bytes, arg.data_version)
        }
        _ => Ok(()),
    }
}

/// START: ENXIO when running already. CPU mode programs and enables each
/// CPU of the set here; thread mode leaves it to the switch-in hook.
fn start(ctx: &HwtContext) -> KResult<()> {
    {
        let mut l = ctx.locked.lock();
        if l.state == CtxState::Running {
            return Err(ENXIO);
        }
        l.state = CtxState::Running;
    }
    if !ctx.cpu_mode() {
        return Ok(());
    }
    let r = start_cpus(ctx);
    if r.is_err() {
        // FreeBSD ignores a failed configure; the context stays stopped
        // here instead, and userland hears why.
        ctx.locked.lock().state = CtxState::Stopped;
    }
    r
}

/// `hwt_vm_start_cpu_mode`.
fn start_cpus(ctx: &HwtContext) -> KResult<()> {
    let backend = &ctx.backend;
    let mut enabled = kpi::malloc::KVec::with_capacity(ctx.cpus.len(), Wait::WaitOk)?;
    for cpu in ctx.cpus.iter() {
        // A CPU halted since ALLOC is skipped, as FreeBSD does.
        if !kpi::cpu::is_active(cpu.cpu_id) {
            continue;
        }
        let _bind = kpi::cpu::bind(cpu.cpu_id);
        backend
            .ops
            .configure(ctx, cpu.cpu_id, BufId::Cpu(cpu.cpu_id))?;
        let _ = enabled.push_within_capacity(cpu.cpu_id);
    }
    if backend.has_smp() {
        backend.ops.enable_smp(ctx)?;
    } else {
        for &cpu in enabled.iter() {
            let _bind = kpi::cpu::bind(cpu);
            backend.ops.enable(ctx, cpu);
        }
    }
    Ok(())
}

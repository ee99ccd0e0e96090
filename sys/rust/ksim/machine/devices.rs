//! Character devices (make_dev(9), the generic ioctl(2) and mmap(2) paths
//! of a cdev) and the hwt(4) hook (`hwt_hook`, HWT_HOOKS).
//!
//! A driver registers a [`DeviceSw`] under a name in /dev; processes open
//! it with [`Machine::dev_open`] (the permission check of devfs), then
//! call [`Machine::dev_ioctl`], which does what kern_ioctl() does with the
//! command word (copyin of `IOCPARM_LEN` bytes for IOC_IN, copyout for
//! IOC_OUT) around the driver's d_ioctl, and [`Machine::dev_mmap`], which
//! gets the object d_mmap_single hands out.

use std::sync::Arc;

use super::{Machine, current};

/// What a driver does for its device: d_ioctl and d_mmap_single.
pub trait DeviceSw: Send + Sync {
    /// d_ioctl: `data` is the argument area the kernel copied in
    /// (`IOCPARM_LEN(cmd)` bytes) and copies out for IOC_OUT commands.
    fn ioctl(&self, cmd: u32, data: &mut [u8]) -> Result<(), i32>;
    /// d_mmap_single: the object to map for `[offset, offset + size)`
    /// with protection `prot` (PROT_* bits).
    fn mmap_single(&self, offset: u64, size: u64, prot: i32) -> Result<MappedObject, i32>;
}

/// Pages a device lets a process map: what a user mapping reads.
pub trait PagedObject: Send + Sync {
    /// Its size in bytes.
    fn len(&self) -> u64;
    /// Whether it is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads `buf.len()` bytes at `offset` (within [`PagedObject::len`]).
    fn read(&self, offset: u64, buf: &mut [u8]);
    /// A descriptor of its memory that a host process can map, if it has
    /// one.
    fn fd(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }
}

/// An object a device mapped.
pub type MappedObject = Arc<dyn PagedObject>;

/// A device in /dev.
#[derive(Clone)]
pub(crate) struct Device {
    pub(crate) id: u64,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) mode: u32,
    pub(crate) sw: Arc<dyn DeviceSw>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("id", &self.id)
            .field("uid", &self.uid)
            .field("gid", &self.gid)
            .field("mode", &format_args!("{:o}", self.mode))
            .finish()
    }
}

/// An open descriptor of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevFd {
    /// The device's name under /dev.
    pub name: String,
    id: u64,
    read: bool,
    write: bool,
}

/// Which record the kernel hands the hwt hook (`struct hwt_record_entry`
/// as the kernel fills it on its stack).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwtRecordEntry {
    /// `record_type`: HWT_RECORD_EXECUTABLE, _MMAP or _MUNMAP.
    pub record_type: u32,
    /// The object's path (none for MUNMAP).
    pub fullpath: Option<String>,
    /// Where it was mapped (the PIE base for an executable).
    pub addr: u64,
    /// Where the run-time linker was mapped (executables).
    pub baseaddr: u64,
}

/// The calls of `HWT_CALL_HOOK(td, func, arg)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HwtHookCall {
    /// HWT_SWITCH_IN.
    SwitchIn,
    /// HWT_SWITCH_OUT.
    SwitchOut,
    /// HWT_THREAD_EXIT.
    ThreadExit,
    /// HWT_THREAD_CREATE (the thread is the new one; the creator runs it).
    ThreadCreate,
    /// HWT_THREAD_SET_NAME.
    ThreadSetName,
    /// HWT_RECORD (munmap).
    Record(HwtRecordEntry),
    /// HWT_MMAP.
    Mmap(HwtRecordEntry),
    /// HWT_EXEC.
    Exec(HwtRecordEntry),
}

/// The hwt hook: the thread the call is about, and the call.
pub type HwtHookFn = Arc<dyn Fn(u32, &HwtHookCall) + Send + Sync>;

/// `P2_HWT`: the process is traced by hwt(4).
pub const P2_HWT: u32 = 0x0200_0000;

const IOC_VOID: u32 = 0x2000_0000;
const IOC_OUT: u32 = 0x4000_0000;
const IOC_IN: u32 = 0x8000_0000;
const IOCPARM_MASK: u32 = 0x1fff;
/// `IOCPARM_MAX`: the largest argument kern_ioctl() copies.
const IOCPARM_MAX: usize = 1 << 13;
/// `SPECNAMELEN`.
const SPECNAMELEN: usize = 255;

const EPERM: i32 = 1;
const EBADF: i32 = 9;
const EACCES: i32 = 13;
const EEXIST: i32 = 17;
const ENXIO: i32 = 6;
const ENODEV: i32 = 19;
const EINVAL: i32 = 22;
const ENOENT: i32 = 2;
const ENOTTY: i32 = 25;

/// `make_dev_s(9)` with MAKEDEV_CHECKNAME: a device `name` under /dev.
pub fn make_dev(
    name: &str,
    uid: u32,
    gid: u32,
    mode: u32,
    sw: Arc<dyn DeviceSw>,
) -> Result<u64, i32> {
    // devfs's name check: no empty name, no "." or "..", no empty or
    // dot components, nothing over SPECNAMELEN.
    let bad = name.is_empty()
        || name.len() > SPECNAMELEN
        || name.starts_with('/')
        || name
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(EINVAL);
    }
    let m = current();
    let mut h = m.0.handlers();
    if h.devices.contains_key(name) {
        return Err(EEXIST);
    }
    h.next_device_id += 1;
    let id = h.next_device_id;
    h.devices.insert(
        name.to_string(),
        Device {
            id,
            uid,
            gid,
            mode,
            sw,
        },
    );
    Ok(id)
}

/// `destroy_dev(9)`: the device leaves /dev; descriptors still open on it
/// get ENXIO from then on.
pub fn destroy_dev(id: u64) {
    let Some(m) = super::try_current() else {
        return;
    };
    let removed = {
        let mut h = m.0.handlers();
        let name = h
            .devices
            .iter()
            .find(|(_, d)| d.id == id)
            .map(|(n, _)| n.clone());
        name.and_then(|n| h.devices.remove(&n))
    };
    // The driver's handle is released outside the handlers' lock: it may
    // free kernel memory.
    drop(removed);
}

/// Installs the hwt hook (`hwt_hook = ...`); None removes it.
pub fn set_hwt_hook(hook: Option<HwtHookFn>) {
    current().0.handlers().hwt_hook = hook;
}

impl Machine {
    /// The devices in /dev, by name.
    pub fn dev_names(&self) -> Vec<String> {
        self.0.handlers().devices.keys().cloned().collect()
    }

    /// A device's owner, group and mode.
    pub fn dev_perms(&self, name: &str) -> Option<(u32, u32, u32)> {
        let name = name.strip_prefix("/dev/").unwrap_or(name);
        self.0
            .handlers()
            .devices
            .get(name)
            .map(|d| (d.uid, d.gid, d.mode))
    }

    /// open(2) of `/dev/<name>` by thread `tid` for reading and/or
    /// writing, with devfs's permission check (owner, group, other bits;
    /// root may always).
    pub fn dev_open(&self, tid: u32, path: &str, read: bool, write: bool) -> Result<DevFd, i32> {
        let name = path.strip_prefix("/dev/").ok_or(ENOENT)?;
        let dev = self.0.handlers().devices.get(name).cloned().ok_or(ENOENT)?;
        let cred = {
            let st = self.st();
            let pid = st.thread_pid(tid).ok_or(EPERM)?;
            st.proc_info(pid).ok_or(EPERM)?.cred
        };
        if cred.uid != 0 {
            let bits = if cred.uid == dev.uid {
                dev.mode >> 6
            } else if cred.gid == dev.gid || cred.rgid == dev.gid || cred.svgid == dev.gid {
                dev.mode >> 3
            } else {
                dev.mode
            };
            if (read && bits & 4 == 0) || (write && bits & 2 == 0) {
                return Err(EACCES);
            }
        }
        Ok(DevFd {
            name: name.to_string(),
            id: dev.id,
            read,
            write,
        })
    }

    /// The device a descriptor is open on, if it still exists.
    fn dev_of(&self, fd: &DevFd) -> Result<Device, i32> {
        self.0
            .handlers()
            .devices
            .values()
            .find(|d| d.id == fd.id)
            .cloned()
            .ok_or(ENXIO)
    }

    /// ioctl(2) by thread `tid` on `fd` with command `cmd` and argument
    /// `arg` (a user address for commands that carry a structure), as
    /// kern_ioctl() runs a device's d_ioctl.
    pub fn dev_ioctl(&self, tid: u32, fd: &DevFd, cmd: u32, arg: u64) -> Result<(), i32> {
        if !fd.read && !fd.write {
            return Err(EBADF);
        }
        let size = ((cmd >> 16) & IOCPARM_MASK) as usize;
        if cmd & (IOC_VOID | IOC_IN | IOC_OUT) == 0
            || size > IOCPARM_MAX
            || (cmd & IOC_VOID != 0 && size > 0 && size != 4)
        {
            return Err(ENOTTY);
        }
        let dev = self.dev_of(fd)?;
        let mut data = vec![0u8; size.max(if cmd & IOC_VOID != 0 { 4 } else { 0 })];
        if cmd & IOC_IN != 0 && size > 0 {
            let bytes = self.in_thread(tid, || crate::kern::copyin(arg, size))?;
            data.copy_from_slice(&bytes);
        } else if cmd & IOC_VOID != 0 {
            data[..4].copy_from_slice(&(arg as u32).to_ne_bytes());
        }
        self.in_thread(tid, || dev.sw.ioctl(cmd, &mut data))?;
        if cmd & IOC_OUT != 0 && size > 0 {
            self.in_thread(tid, || crate::kern::copyout(&data, arg))?;
        }
        Ok(())
    }

    /// mmap(2) of `fd` by thread `tid`: what d_mmap_single hands out for
    /// `[offset, offset + size)` with `prot`.
    pub fn dev_mmap(
        &self,
        tid: u32,
        fd: &DevFd,
        offset: u64,
        size: u64,
        prot: i32,
    ) -> Result<MappedObject, i32> {
        const PROT_WRITE: i32 = 2;
        if !fd.read || (prot & PROT_WRITE != 0 && !fd.write) {
            return Err(EACCES);
        }
        let dev = self.dev_of(fd)?;
        let obj = self.in_thread(tid, || dev.sw.mmap_single(offset, size, prot))?;
        if offset.checked_add(size).is_none_or(|end| end > obj.len()) {
            return Err(ENODEV);
        }
        Ok(obj)
    }

    /// `p_flag2` of a process.
    pub fn proc_flag2(&self, pid: u32) -> u32 {
        self.st().procs.get(&pid).map_or(0, |p| p.flag2)
    }

    /// Whether an hwt hook is installed (`HWT_HOOK_INSTALLED`).
    pub(crate) fn hwt_hook_installed(&self) -> bool {
        self.0.handlers().hwt_hook.is_some()
    }

    /// `HWT_CALL_HOOK(td, func, arg)` in the context of thread `ctx_tid`
    /// about thread `td`.
    pub(crate) fn hwt_hook(&self, ctx_tid: u32, td: u32, call: &HwtHookCall) {
        let hook = self.0.handlers().hwt_hook.clone();
        if let Some(h) = hook {
            self.with_ctx(ctx_tid, || h(td, call));
        }
    }

    /// The hwt hook as the scheduler calls it: on `cpu`, with the thread
    /// lock (a spin lock) held.
    pub(crate) fn hwt_switch_hook(&self, cpu: u32, tid: u32, call: &HwtHookCall) {
        let hook = self.0.handlers().hwt_hook.clone();
        if let Some(h) = hook {
            self.with_ctx_on(cpu, tid, || {
                self.st().critnest += 1;
                h(tid, call);
                self.st().critnest -= 1;
            });
        }
    }

    /// Sends signal `sig` to `pid` (kill(2)): a PCATCH sleep of its
    /// threads ends.
    pub fn kill(&self, pid: u32, sig: i32) {
        self.st().signals.push((pid, sig));
        crate::sched::signal(pid);
    }
}

/// `p_flag2 |= set; p_flag2 &= ~clear`.
pub fn proc_flag2_set(pid: u32, set: u32, clear: u32) {
    let m = current();
    let mut st = m.st();
    if let Some(p) = st.procs.get_mut(&pid) {
        p.flag2 = (p.flag2 | set) & !clear;
    }
}

/// `p_flag2` of a process of the current machine.
pub fn proc_flag2(pid: u32) -> u32 {
    current().proc_flag2(pid)
}

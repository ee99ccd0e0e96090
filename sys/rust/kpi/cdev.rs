//! Character devices: make_dev_s(9) / destroy_dev(9) with a driver's
//! d_ioctl and d_mmap_single, and the pages a device lets processes map
//! (a cdev pager object of wired pages, vm_page_alloc(9)).

use crate::KResult;
use crate::malloc::{KBox, Wait};

/// What a driver does for its device.
pub trait CdevSw: Send + Sync {
    /// d_ioctl: `data` is the argument area the kernel copied in
    /// (`IOCPARM_LEN(cmd)` bytes; kern_ioctl() copies it out again for
    /// IOC_OUT commands). The caller is [`crate::proc::curthread`].
    fn ioctl(&self, cmd: u32, data: &mut [u8]) -> KResult<()>;

    /// d_mmap_single: the pages to map for `[offset, offset + size)` with
    /// protection `prot` (`PROT_*`). ENODEV by default, as for a device
    /// without the method.
    fn mmap_single(&self, offset: u64, size: u64, prot: i32) -> KResult<PageObject> {
        let _ = (offset, size, prot);
        Err(crate::errno::ENODEV)
    }
}

/// `PROT_READ`.
pub const PROT_READ: i32 = 1;
/// `PROT_WRITE`.
pub const PROT_WRITE: i32 = 2;
/// `UID_ROOT`.
pub const UID_ROOT: u32 = 0;
/// `GID_WHEEL`.
pub const GID_WHEEL: u32 = 0;

/// A device in /dev; destroyed when dropped. On FreeBSD that is
/// destroy_dev_sched(9), since the last reference may go inside one of
/// the device's own methods, where destroy_dev(9) would wait for itself:
/// the device leaves /dev shortly after, calls already in its methods
/// finish first, and the driver's [`CdevSw`] is dropped after them (the
/// module's unload drains these, destroy_dev_drain(9)). [`make_dev`] of
/// a name whose device is still on its way out waits for it (a second at
/// most), so that a name is free again once its `Cdev` is dropped, as in
/// the simulator, which destroys at once.
#[derive(Debug)]
pub struct Cdev(u64);

/// `make_dev_s(9)` with MAKEDEV_CHECKNAME | MAKEDEV_WAITOK: `/dev/<name>`
/// owned by `uid`:`gid` with `mode`, served by `sw`. EEXIST when the name
/// is taken, EINVAL when devfs refuses it.
pub fn make_dev(name: &str, uid: u32, gid: u32, mode: u32, sw: KBox<dyn CdevSw>) -> KResult<Cdev> {
    crate::backend::make_dev(name, uid, gid, mode, sw).map(Cdev)
}

impl Drop for Cdev {
    fn drop(&mut self) {
        crate::backend::destroy_dev(self.0);
    }
}

/// Wired, zeroed pages that a device maps into processes (an
/// OBJT_MGTDEVICE object) and the kernel reads and writes through a
/// kernel mapping; each page has its physical address, for hardware that
/// writes to them. Cloning takes a reference; the pages are freed with
/// the last.
#[derive(Debug, Clone)]
pub struct PageObject(pub(crate) crate::backend::PageObject);

/// The page size.
pub const PAGE_SIZE: usize = 4096;

impl PageObject {
    /// `npages` pages, allocated one at a time (not physically
    /// contiguous); ENOMEM when memory runs out. On FreeBSD
    /// [`Wait::NoWait`] concerns the pages only: the pager object and the
    /// kernel mapping are made with `M_WAITOK`, so the caller may sleep
    /// either way.
    pub fn alloc(npages: usize, wait: Wait) -> KResult<PageObject> {
        crate::backend::PageObject::alloc(npages, wait).map(PageObject)
    }
    /// The number of pages.
    pub fn npages(&self) -> usize {
        self.0.npages()
    }
    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.npages() * PAGE_SIZE
    }
    /// Whether it has no pages.
    pub fn is_empty(&self) -> bool {
        self.npages() == 0
    }
    /// The physical address of page `i` (`VM_PAGE_TO_PHYS`).
    pub fn phys(&self, i: usize) -> u64 {
        self.0.phys(i)
    }
    /// Reads `buf.len()` bytes at `offset` through the kernel mapping.
    pub fn read(&self, offset: usize, buf: &mut [u8]) {
        crate::kassert!(
            offset
                .checked_add(buf.len())
                .is_some_and(|e| e <= self.len()),
            "PageObject::read past the end"
        );
        self.0.read(offset, buf);
    }
    /// Writes `data` at `offset` through the kernel mapping.
    pub fn write(&self, offset: usize, data: &[u8]) {
        crate::kassert!(
            offset
                .checked_add(data.len())
                .is_some_and(|e| e <= self.len()),
            "PageObject::write past the end"
        );
        self.0.write(offset, data);
    }
}

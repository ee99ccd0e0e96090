//! Physical memory of the simulated machine, for what the hardware models
//! reach by physical address (Intel PT's ToPA tables and output regions).
//!
//! The kernel side allocates *objects* of whole pages (a trace buffer, a
//! ToPA table). Each page gets a physical address from 4 GiB up, so that
//! it cannot be mistaken for a user address of the programs (which live
//! below), and the pages of one object are never contiguous, so that a
//! model that writes past a page without going through its table is
//! caught. Addresses are never reused: a write by a model to an address
//! whose object was freed lands in no object, is dropped and is counted
//! as a stray write ([`PhysMem::stray_writes`]), which tests check.
//!
//! Each object is backed by a memfd mapped shared, so that a host program
//! (a trace consumer served by ksimd) can map the same pages read-only
//! from [`PhysMem::object_fd`].

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The page size.
pub const PAGE_SIZE: u64 = 4096;
/// The first physical address handed out.
pub const PHYS_BASE: u64 = 0x1_0000_0000;
/// Frames skipped after each page, so an object's pages are never
/// adjacent.
const FRAME_GAP: u64 = 1;
/// The byte uninitialised pages are filled with (`zeroed` false), so a
/// reader of memory nobody wrote sees garbage, not zeros.
pub const POISON: u8 = 0xA5;
/// Stray writes kept for inspection (all are counted).
const STRAYS_KEPT: usize = 64;

/// An object of physical pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjId(pub u64);

/// What a physical-memory operation can fail with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PhysError {
    /// An object of no pages, or the host refused the memory.
    NoMemory(String),
    /// No live object with this id.
    NoObject(ObjId),
    /// An access outside the object or to an address no live object has.
    Unmapped(u64),
}

impl std::fmt::Display for PhysError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PhysError::NoMemory(why) => write!(f, "no physical memory: {why}"),
            PhysError::NoObject(o) => write!(f, "no physical object {}", o.0),
            PhysError::Unmapped(a) => write!(f, "no physical page at {a:#x}"),
        }
    }
}

impl std::error::Error for PhysError {}

/// A write to a physical address no live object had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrayWrite {
    /// The first byte's address.
    pub paddr: u64,
    /// The length of the write.
    pub len: usize,
}

struct Object {
    fd: OwnedFd,
    base: *mut u8,
    npages: usize,
    paddrs: Vec<u64>,
}

// SAFETY: `base` is a private shared mapping owned by the object; every
// access to it goes through PhysMem's lock.
unsafe impl Send for Object {}

impl Drop for Object {
    fn drop(&mut self) {
        // SAFETY: the mapping made in alloc_object, of this length, not
        // used after this.
        unsafe { libc::munmap(self.base.cast(), self.npages * PAGE_SIZE as usize) };
    }
}

#[derive(Default)]
struct Inner {
    objects: HashMap<ObjId, Object>,
    /// Page frame address to (object, page index).
    frames: BTreeMap<u64, (ObjId, usize)>,
    next_frame: u64,
    next_id: u64,
    strays: u64,
    stray_log: Vec<StrayWrite>,
}

/// The machine's physical memory.
pub struct PhysMem {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for PhysMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let i = self.lock();
        f.debug_struct("PhysMem")
            .field("objects", &i.objects.len())
            .field("strays", &i.strays)
            .finish()
    }
}

impl Default for PhysMem {
    fn default() -> Self {
        PhysMem::new()
    }
}

impl PhysMem {
    /// An empty physical memory.
    pub fn new() -> PhysMem {
        PhysMem {
            inner: Mutex::new(Inner {
                next_frame: PHYS_BASE,
                next_id: 1,
                ..Inner::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Allocates an object of `npages` pages, zero-filled when `zeroed`,
    /// else filled with [`POISON`].
    pub fn alloc_object(&self, npages: usize, zeroed: bool) -> Result<ObjId, PhysError> {
        if npages == 0 {
            return Err(PhysError::NoMemory("an object of no pages".into()));
        }
        let len = npages * PAGE_SIZE as usize;
        // SAFETY: a C string literal; flags the kernel knows.
        let raw = unsafe { libc::memfd_create(c"ksim-physmem".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(PhysError::NoMemory(
                std::io::Error::last_os_error().to_string(),
            ));
        }
        // SAFETY: a descriptor memfd_create just returned, owned by no one
        // else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate of our own descriptor.
        if unsafe { libc::ftruncate(raw, len as libc::off_t) } != 0 {
            return Err(PhysError::NoMemory(
                std::io::Error::last_os_error().to_string(),
            ));
        }
        // SAFETY: a new shared mapping of the whole file, at an address
        // the kernel picks.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(PhysError::NoMemory(
                std::io::Error::last_os_error().to_string(),
            ));
        }
        let base = base.cast::<u8>();
        if !zeroed {
            // SAFETY: the mapping just made, `len` bytes long.
            unsafe { std::ptr::write_bytes(base, POISON, len) };
        }
        let mut i = self.lock();
        let id = ObjId(i.next_id);
        i.next_id += 1;
        // Handed out from the top of the object's span down, with gaps.
        let span = npages as u64 * (1 + FRAME_GAP) * PAGE_SIZE;
        let first = i.next_frame;
        i.next_frame += span;
        let paddrs: Vec<u64> = (0..npages as u64)
            .map(|p| first + span - (p + 1) * (1 + FRAME_GAP) * PAGE_SIZE)
            .collect();
        for (n, &pa) in paddrs.iter().enumerate() {
            i.frames.insert(pa, (id, n));
        }
        i.objects.insert(
            id,
            Object {
                fd,
                base,
                npages,
                paddrs,
            },
        );
        Ok(id)
    }

    /// The physical address of page `page` of `obj`.
    pub fn page_paddr(&self, obj: ObjId, page: usize) -> Option<u64> {
        self.lock()
            .objects
            .get(&obj)
            .and_then(|o| o.paddrs.get(page).copied())
    }

    /// The pages of `obj`.
    pub fn npages(&self, obj: ObjId) -> Option<usize> {
        self.lock().objects.get(&obj).map(|o| o.npages)
    }

    /// Frees `obj`; its addresses are never handed out again.
    pub fn free_object(&self, obj: ObjId) -> Result<(), PhysError> {
        let o = {
            let mut i = self.lock();
            let o = i.objects.remove(&obj).ok_or(PhysError::NoObject(obj))?;
            for pa in &o.paddrs {
                i.frames.remove(pa);
            }
            o
        };
        drop(o);
        Ok(())
    }

    /// The live objects (a leak check at unload wants none).
    pub fn live_objects(&self) -> usize {
        self.lock().objects.len()
    }

    /// The object's memfd, which a host client may map (read-only) to see
    /// the pages; valid while the object lives.
    pub fn object_fd(&self, obj: ObjId) -> Option<OwnedFd> {
        let i = self.lock();
        let o = i.objects.get(&obj)?;
        o.fd.as_fd().try_clone_to_owned().ok()
    }

    /// Runs `f` with the object's descriptor borrowed.
    pub fn with_object_fd<R>(&self, obj: ObjId, f: impl FnOnce(BorrowedFd<'_>) -> R) -> Option<R> {
        let i = self.lock();
        i.objects.get(&obj).map(|o| f(o.fd.as_fd()))
    }

    /// Where `paddr` is: the object's host pointer to that byte and how
    /// many bytes of the page are left from it.
    fn locate(i: &Inner, paddr: u64) -> Option<(*mut u8, usize)> {
        let frame = paddr & !(PAGE_SIZE - 1);
        let &(id, page) = i.frames.get(&frame)?;
        let o = i.objects.get(&id)?;
        let off = page as u64 * PAGE_SIZE + (paddr - frame);
        // SAFETY (of the pointer's later use): in the object's mapping.
        Some((
            o.base.wrapping_add(off as usize),
            (PAGE_SIZE - (paddr - frame)) as usize,
        ))
    }

    /// Reads physical memory; each page on the way must belong to a live
    /// object.
    pub fn read_phys(&self, paddr: u64, buf: &mut [u8]) -> Result<(), PhysError> {
        let i = self.lock();
        let mut done = 0;
        while done < buf.len() {
            let at = paddr + done as u64;
            let (p, left) = Self::locate(&i, at).ok_or(PhysError::Unmapped(at))?;
            let n = left.min(buf.len() - done);
            // SAFETY: `p` has `left` >= n bytes of the mapping after it,
            // and the lock keeps the object alive.
            unsafe { std::ptr::copy_nonoverlapping(p, buf[done..].as_mut_ptr(), n) };
            done += n;
        }
        Ok(())
    }

    /// Writes physical memory. Bytes for addresses no live object has are
    /// dropped and the write is counted as stray (and is an error).
    pub fn write_phys(&self, paddr: u64, data: &[u8]) -> Result<(), PhysError> {
        let mut i = self.lock();
        let mut done = 0;
        while done < data.len() {
            let at = paddr + done as u64;
            let Some((p, left)) = Self::locate(&i, at) else {
                i.strays += 1;
                if i.stray_log.len() < STRAYS_KEPT {
                    i.stray_log.push(StrayWrite {
                        paddr: at,
                        len: data.len() - done,
                    });
                }
                return Err(PhysError::Unmapped(at));
            };
            let n = left.min(data.len() - done);
            // SAFETY: as in read_phys.
            unsafe { std::ptr::copy_nonoverlapping(data[done..].as_ptr(), p, n) };
            done += n;
        }
        Ok(())
    }

    fn object_span(i: &Inner, obj: ObjId, offset: usize, len: usize) -> Result<*mut u8, PhysError> {
        let o = i.objects.get(&obj).ok_or(PhysError::NoObject(obj))?;
        let size = o.npages * PAGE_SIZE as usize;
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(PhysError::Unmapped(offset as u64));
        }
        Ok(o.base.wrapping_add(offset))
    }

    /// Reads `buf.len()` bytes at `offset` in `obj` (its pages in order).
    pub fn read_object(&self, obj: ObjId, offset: usize, buf: &mut [u8]) -> Result<(), PhysError> {
        let i = self.lock();
        let p = Self::object_span(&i, obj, offset, buf.len())?;
        // SAFETY: object_span checked the range is in the mapping.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Writes `data` at `offset` in `obj` (the kernel filling a ToPA
    /// table through its virtual mapping).
    pub fn write_object(&self, obj: ObjId, offset: usize, data: &[u8]) -> Result<(), PhysError> {
        let i = self.lock();
        let p = Self::object_span(&i, obj, offset, data.len())?;
        // SAFETY: object_span checked the range is in the mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    /// Writes to addresses no live object had, so far.
    pub fn stray_writes(&self) -> u64 {
        self.lock().strays
    }

    /// The first stray writes, for a test's message.
    pub fn stray_log(&self) -> Vec<StrayWrite> {
        self.lock().stray_log.clone()
    }

    /// The object and offset of a physical address (`vtophys`'s inverse).
    pub fn owner(&self, paddr: u64) -> Option<(ObjId, usize)> {
        let i = self.lock();
        let frame = paddr & !(PAGE_SIZE - 1);
        i.frames
            .get(&frame)
            .map(|&(id, page)| (id, page * PAGE_SIZE as usize + (paddr - frame) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_pages_and_strays() {
        let pm = PhysMem::new();
        let a = pm.alloc_object(3, true).unwrap();
        let b = pm.alloc_object(1, false).unwrap();
        assert_eq!(pm.live_objects(), 2);
        let pa: Vec<u64> = (0..3).map(|i| pm.page_paddr(a, i).unwrap()).collect();
        for w in pa.windows(2) {
            assert_ne!(w[0] + PAGE_SIZE, w[1], "pages are not contiguous");
        }
        assert!(pa.iter().all(|&p| p >= PHYS_BASE && p % PAGE_SIZE == 0));
        // A write across the end of page 0 stops at the page: the next
        // frame is a gap.
        assert!(pm.write_phys(pa[0] + 4090, &[1; 10]).is_err());
        assert_eq!(pm.stray_writes(), 1);
        pm.write_phys(pa[1] + 8, b"hello").unwrap();
        let mut buf = [0u8; 5];
        pm.read_object(a, 4096 + 8, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        let mut one = [0u8; 1];
        pm.read_object(b, 0, &mut one).unwrap();
        assert_eq!(one[0], POISON);
        assert_eq!(pm.owner(pa[2] + 3), Some((a, 2 * 4096 + 3)));
        // The memfd shows the same bytes.
        let fd = pm.object_fd(a).unwrap();
        let mut file = std::fs::File::from(fd);
        let mut all = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut all).unwrap();
        assert_eq!(&all[4096 + 8..4096 + 13], b"hello");
        // A client's read-only shared mapping sees later writes too.
        let raw = pm
            .with_object_fd(a, |fd| std::os::fd::AsRawFd::as_raw_fd(&fd))
            .unwrap();
        // SAFETY: a new read-only shared mapping of the object's three
        // pages, unmapped below.
        let view = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * 4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        assert_ne!(view, libc::MAP_FAILED);
        pm.write_phys(pa[2] + 1, b"later").unwrap();
        // SAFETY: the mapping is 3 pages long; the bytes were written.
        let seen = unsafe { std::slice::from_raw_parts(view.cast::<u8>().add(2 * 4096 + 1), 5) };
        assert_eq!(seen, b"later");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(view, 3 * 4096) };
        pm.free_object(a).unwrap();
        assert!(pm.write_phys(pa[1], &[0]).is_err());
        assert_eq!(pm.stray_writes(), 2);
        assert_eq!(pm.live_objects(), 1);
        assert!(pm.free_object(a).is_err());
        let c = pm.alloc_object(1, true).unwrap();
        assert!(!pa.contains(&pm.page_paddr(c, 0).unwrap()), "no reuse");
    }
}

//! A process's address space (FreeBSD's `struct vmspace`), shared by the
//! CPUs of its threads: the pages live in host memory the space owns, and
//! every CPU's emulator maps the same host pages, so what one thread
//! stores the others load.
//!
//! The space keeps the list of regions and a generation that each change
//! bumps; a CPU brings its emulator's mappings up to date
//! ([`crate::cpu::Cpu`]'s `sync`) before it runs or touches memory, and
//! keeps a reference to the host pages it maps, so pages that one thread
//! unmapped stay allocated until every CPU has unmapped them too.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{CpuError, PAGE_SIZE, Prot};

/// Zero-filled, page-aligned host memory backing some pages.
#[derive(Debug)]
pub(super) struct Block {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the block is plain memory; the machine runs one CPU at a time
// and the emulators touch it only while a CPU runs, under `&mut Cpu`.
unsafe impl Send for Block {}
// SAFETY: as above: no two threads use the memory at once.
unsafe impl Sync for Block {}

impl Block {
    fn new(len: usize) -> Result<Block, CpuError> {
        let layout =
            Layout::from_size_align(len, PAGE_SIZE as usize).map_err(|_| CpuError::Unaligned {
                addr: 0,
                len: len as u64,
            })?;
        // SAFETY: the layout has a non-zero size (callers map at least a
        // page).
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(CpuError::Emulator {
                call: "alloc",
                text: format!("no host memory for {len} bytes"),
            });
        }
        Ok(Block { ptr, len })
    }

    /// The host address of byte `offset`.
    pub(super) fn at(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset < self.len);
        // SAFETY: within the allocation.
        unsafe { self.ptr.add(offset) }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated by Block::new with this layout, freed once.
        unsafe {
            dealloc(
                self.ptr,
                Layout::from_size_align_unchecked(self.len, PAGE_SIZE as usize),
            )
        };
    }
}

/// Pages `[addr, addr + len)` with the same rights, backed by `block`
/// from byte `offset` on.
#[derive(Debug, Clone)]
pub(super) struct Region {
    pub(super) addr: u64,
    pub(super) len: u64,
    pub(super) prot: Prot,
    pub(super) block: Arc<Block>,
    pub(super) offset: usize,
}

impl Region {
    /// The same pages with the same rights and memory.
    pub(super) fn same(&self, other: &Region) -> bool {
        self.addr == other.addr
            && self.len == other.len
            && self.prot == other.prot
            && Arc::ptr_eq(&self.block, &other.block)
            && self.offset == other.offset
    }

    /// The part from `at` on (`at` inside the region, page-aligned).
    fn split_off(&mut self, at: u64) -> Region {
        let head = at - self.addr;
        let tail = Region {
            addr: at,
            len: self.len - head,
            prot: self.prot,
            block: self.block.clone(),
            offset: self.offset + head as usize,
        };
        self.len = head;
        tail
    }

    fn end(&self) -> u64 {
        self.addr + self.len
    }
}

/// The regions of an address space, by first address.
#[derive(Debug, Default)]
pub(super) struct VmSpace {
    pub(super) regions: BTreeMap<u64, Region>,
    pub(super) generation: u64,
}

impl VmSpace {
    /// The region holding `at`, if its rights include `need`.
    pub(super) fn region_at(&self, at: u64, need: Prot) -> Option<&Region> {
        self.regions
            .range(..=at)
            .next_back()
            .map(|(_, r)| r)
            .filter(|r| r.end() > at && r.prot.contains(need))
    }

    fn overlaps(&self, addr: u64, end: u64) -> bool {
        self.regions
            .range(..end)
            .next_back()
            .is_some_and(|(_, r)| r.end() > addr)
    }

    /// Maps `len` zeroed bytes at `addr`; refuses to map over pages
    /// already mapped.
    pub(super) fn map(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), CpuError> {
        let end = addr
            .checked_add(len)
            .ok_or(CpuError::BadAddress { addr, len })?;
        if self.overlaps(addr, end) {
            return Err(CpuError::Emulator {
                call: "uc_mem_map",
                text: format!("{addr:#x}+{len:#x} overlaps a mapping"),
            });
        }
        let size = usize::try_from(len).map_err(|_| CpuError::Unaligned { addr, len })?;
        let block = Arc::new(Block::new(size)?);
        self.regions.insert(
            addr,
            Region {
                addr,
                len,
                prot,
                block,
                offset: 0,
            },
        );
        self.generation += 1;
        Ok(())
    }

    /// Splits regions so that `at` starts one, if it is inside one.
    fn split_at(&mut self, at: u64) {
        let hit = self
            .regions
            .range_mut(..at)
            .next_back()
            .filter(|(_, r)| r.end() > at)
            .map(|(_, r)| r.split_off(at));
        if let Some(tail) = hit {
            self.regions.insert(at, tail);
        }
    }

    /// The regions of `[addr, addr + len)` after splitting at its ends;
    /// BadAddress unless every page is mapped.
    fn isolate(&mut self, addr: u64, len: u64) -> Result<Vec<u64>, CpuError> {
        let end = addr
            .checked_add(len)
            .ok_or(CpuError::BadAddress { addr, len })?;
        let mut next = addr;
        for (&start, r) in self.regions.range(..end) {
            if r.end() <= next {
                continue;
            }
            if start > next {
                break;
            }
            next = r.end();
        }
        if next < end {
            return Err(CpuError::BadAddress { addr, len });
        }
        self.split_at(addr);
        self.split_at(end);
        Ok(self.regions.range(addr..end).map(|(&a, _)| a).collect())
    }

    /// Changes the rights of mapped pages.
    pub(super) fn protect(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), CpuError> {
        for a in self.isolate(addr, len)? {
            if let Some(r) = self.regions.get_mut(&a) {
                r.prot = prot;
            }
        }
        self.generation += 1;
        Ok(())
    }

    /// Unmaps pages, all of which must be mapped.
    pub(super) fn unmap(&mut self, addr: u64, len: u64) -> Result<(), CpuError> {
        for a in self.isolate(addr, len)? {
            self.regions.remove(&a);
        }
        self.generation += 1;
        Ok(())
    }

    /// Unmaps whatever is mapped in `[addr, addr + len)`.
    pub(super) fn unmap_holes(&mut self, addr: u64, len: u64) -> Result<(), CpuError> {
        let end = addr
            .checked_add(len)
            .ok_or(CpuError::BadAddress { addr, len })?;
        self.split_at(addr);
        self.split_at(end);
        let inside: Vec<u64> = self.regions.range(addr..end).map(|(&a, _)| a).collect();
        for a in inside {
            self.regions.remove(&a);
        }
        self.generation += 1;
        Ok(())
    }

    /// The lowest page-aligned address from `hint` on with `len` bytes
    /// free (mmap(2) without MAP_FIXED).
    pub(super) fn find_free(&self, hint: u64, len: u64) -> Option<u64> {
        let mut at = hint.next_multiple_of(PAGE_SIZE);
        for r in self.regions.values() {
            if r.end() <= at {
                continue;
            }
            if r.addr >= at.checked_add(len)? {
                break;
            }
            at = r.end();
        }
        at.checked_add(len).map(|_| at)
    }
}

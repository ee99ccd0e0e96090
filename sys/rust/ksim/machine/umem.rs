//! User memory: mappings for system call arguments, and page protections.

use super::*;

impl Machine {
    /// Maps `len` zeroed bytes into `pid`'s address space.
    pub fn user_alloc(&self, pid: u32, len: usize) -> u64 {
        let mut st = self.st();
        let p = st.procs.get_mut(&pid).expect("user_alloc for unknown pid");
        let addr = p.next_uaddr;
        p.next_uaddr += (len as u64).div_ceil(4096).max(1) * 4096 + 4096;
        p.umem.insert(addr, vec![0; len]);
        addr
    }

    /// Copies `data` into `pid`'s memory at `addr` (as the process would
    /// have before protecting it).
    pub fn user_write(&self, pid: u32, addr: u64, data: &[u8]) {
        self.st()
            .umem_write_raw(pid, addr, data)
            .expect("user_write outside a mapping");
    }

    /// mprotect(2) (or munmap(2) for [`UserProt::None`]) of the pages of
    /// `pid`'s memory that `[addr, addr + len)` touches.
    pub fn user_protect(&self, pid: u32, addr: u64, len: u64, prot: UserProt) {
        let mut st = self.st();
        let p = st
            .procs
            .get_mut(&pid)
            .expect("user_protect for unknown pid");
        let mut page = addr & !(PAGE_SIZE - 1);
        while page < addr + len {
            if prot == UserProt::ReadWrite {
                p.prot.remove(&page);
            } else {
                p.prot.insert(page, prot);
            }
            page += PAGE_SIZE;
        }
    }

    /// Reads `len` bytes of `pid`'s memory at `addr`.
    pub fn user_read(&self, pid: u32, addr: u64, len: usize) -> Vec<u8> {
        let mut st = self.st();
        let (buf, off) = st
            .mapping(pid, addr, len)
            .expect("user_read outside a mapping");
        buf[off..off + len].to_vec()
    }
}

impl State {
    fn mapping(&mut self, pid: u32, addr: u64, len: usize) -> Option<(&mut Vec<u8>, usize)> {
        let p = self.procs.get_mut(&pid)?;
        let (&base, buf) = p.umem.range_mut(..=addr).next_back()?;
        let off = (addr - base) as usize;
        (off.checked_add(len)? <= buf.len()).then_some((buf, off))
    }

    /// The protection of the page holding `addr`.
    fn page_prot(&self, pid: u32, addr: u64) -> UserProt {
        self.procs
            .get(&pid)
            .and_then(|p| p.prot.get(&(addr & !(PAGE_SIZE - 1))).copied())
            .unwrap_or(UserProt::ReadWrite)
    }

    /// The first address of `[addr, addr + len)` on a page with a
    /// protection that `bad` refuses.
    fn first_fault(
        &self,
        pid: u32,
        addr: u64,
        len: usize,
        bad: fn(UserProt) -> bool,
    ) -> Option<u64> {
        let end = addr.checked_add(len as u64)?;
        let mut page = addr & !(PAGE_SIZE - 1);
        while page < end {
            if bad(self.page_prot(pid, page)) {
                return Some(page.max(addr));
            }
            page += PAGE_SIZE;
        }
        None
    }

    /// copyin: fails at an unmapped page anywhere in the range.
    pub(crate) fn umem_read(&mut self, pid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
        if self
            .first_fault(pid, addr, len, |p| p == UserProt::None)
            .is_some()
        {
            return None;
        }
        let (buf, off) = self.mapping(pid, addr, len)?;
        Some(buf[off..off + len].to_vec())
    }

    /// copyout: writes up to the first page that is not writable, then
    /// fails, as copyout(9) leaves what it wrote before the fault.
    pub(crate) fn umem_write(&mut self, pid: u32, addr: u64, data: &[u8]) -> Option<()> {
        let fault = self.first_fault(pid, addr, data.len(), |p| p != UserProt::ReadWrite);
        let n = fault.map_or(data.len(), |f| (f - addr) as usize);
        let (buf, off) = self.mapping(pid, addr, data.len())?;
        buf[off..off + n].copy_from_slice(&data[..n]);
        fault.is_none().then_some(())
    }

    /// What the process itself writes (test set-up), whatever the pages'
    /// protection.
    pub(crate) fn umem_write_raw(&mut self, pid: u32, addr: u64, data: &[u8]) -> Option<()> {
        let (buf, off) = self.mapping(pid, addr, data.len())?;
        buf[off..off + data.len()].copy_from_slice(data);
        Some(())
    }
}

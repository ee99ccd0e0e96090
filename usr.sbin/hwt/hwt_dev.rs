//! The devices of hwt(4) as hwt(8) reaches them: /dev/hwt and a
//! context's device, opened, called with ioctl(2) and mapped, on this
//! machine (FreeBSD) or on the simulated one (feature `sim`), whose
//! daemon carries the memory an argument's pointers name.

use std::os::fd::{AsRawFd, OwnedFd};

/// Where the devices are.
pub enum Kernel {
    /// This machine's kernel.
    Host,
    /// The simulated machine behind libpmc's simulator transport.
    #[cfg(feature = "sim")]
    Sim(pmc::libpmc_sim::SimTransport),
}

/// An open device.
pub enum Dev {
    /// A descriptor of this machine's.
    Host(OwnedFd),
    /// A handle of the simulated machine's daemon.
    #[cfg(feature = "sim")]
    Sim(u32),
}

/// Memory an ioctl argument's pointer field names: the field's offset in
/// the argument and the bytes (read back after the call).
pub struct Region {
    /// Offset of the pointer in the argument block.
    pub at: usize,
    /// The memory it points to.
    pub bytes: Vec<u8>,
}

/// A mapped trace buffer, read-only.
pub struct Mapping {
    addr: *const u8,
    len: usize,
}

impl Mapping {
    /// The bytes of the buffer now.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes until it is
        // dropped (munmap), and nothing here writes to it.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is the mapping mmap returned, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// mmap(2) of `len` bytes of `fd`, read-only and shared.
fn map_fd(fd: &OwnedFd, len: usize) -> Result<Mapping, i32> {
    // SAFETY: a new mapping, placed by the kernel, of a descriptor we
    // hold; PROT_READ only.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(pmctool::last_errno());
    }
    Ok(Mapping {
        addr: addr as *const u8,
        len,
    })
}

impl Kernel {
    /// open(2) of `path` for reading and writing.
    pub fn open(&self, path: &str) -> Result<Dev, i32> {
        match self {
            Kernel::Host => {
                let c = std::ffi::CString::new(path).map_err(|_| libc::EINVAL)?;
                // SAFETY: a NUL-terminated path; the descriptor is owned
                // below.
                let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR) };
                if fd < 0 {
                    return Err(pmctool::last_errno());
                }
                // SAFETY: open just returned it, and nothing else owns it.
                Ok(Dev::Host(unsafe {
                    <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
                }))
            }
            #[cfg(feature = "sim")]
            Kernel::Sim(sim) => sim.dev_open(path, true).map(Dev::Sim),
        }
    }

    /// ioctl(2) of `cmd` on `dev` with argument block `arg`, whose pointer
    /// fields name `regions` (read back into them after the call).
    pub fn ioctl(
        &self,
        dev: &Dev,
        cmd: u32,
        arg: &mut [u8],
        regions: &mut [Region],
    ) -> Result<(), i32> {
        match (self, dev) {
            (Kernel::Host, Dev::Host(fd)) => {
                for r in regions.iter_mut() {
                    let p = r.bytes.as_mut_ptr() as u64;
                    arg[r.at..r.at + 8].copy_from_slice(&p.to_ne_bytes());
                }
                // SAFETY: the argument block is as long as the command's
                // size, and each pointer in it names a live buffer of
                // the size the command expects there.
                let rc = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as _, arg.as_mut_ptr()) };
                if rc < 0 {
                    return Err(pmctool::last_errno());
                }
                Ok(())
            }
            #[cfg(feature = "sim")]
            (Kernel::Sim(sim), Dev::Sim(h)) => {
                let sent = regions
                    .iter()
                    .map(|r| (r.at as u32, r.bytes.clone()))
                    .collect();
                let back = sim.dev_ioctl(*h, cmd, arg, sent)?;
                for (r, b) in regions.iter_mut().zip(back) {
                    let n = r.bytes.len().min(b.len());
                    r.bytes[..n].copy_from_slice(&b[..n]);
                }
                Ok(())
            }
            #[cfg(feature = "sim")]
            _ => Err(libc::EBADF),
        }
    }

    /// Lets `d` pass: sleeps here; on the simulated machine, lets its
    /// clock go on (its CPUs run meanwhile).
    pub fn pause(&self, d: std::time::Duration) {
        match self {
            Kernel::Host => std::thread::sleep(d),
            #[cfg(feature = "sim")]
            Kernel::Sim(sim) => sim.sleep(d),
        }
    }

    /// The executable objects process `pid` has mapped, as (the address
    /// where the object's start is mapped, path): `kinfo_getvmmap(3)`'s
    /// executable vnode entries on FreeBSD, each object once.
    pub fn proc_maps(&self, pid: u32) -> Result<Vec<(u64, String)>, i32> {
        match self {
            Kernel::Host => host_vmmap(pid),
            #[cfg(feature = "sim")]
            Kernel::Sim(sim) => {
                let mut seen = Vec::new();
                for (start, _, path) in sim.proc_maps(pid)? {
                    if !seen.iter().any(|(_, p)| *p == path) {
                        seen.push((start, path));
                    }
                }
                Ok(seen)
            }
        }
    }

    /// mmap(2) of the `len` bytes of `dev`'s buffer, read-only.
    pub fn map(&self, dev: &Dev, len: usize) -> Result<Mapping, i32> {
        match (self, dev) {
            (Kernel::Host, Dev::Host(fd)) => map_fd(fd, len),
            #[cfg(feature = "sim")]
            (Kernel::Sim(sim), Dev::Sim(h)) => {
                let fd = sim.dev_mmap(*h, 0, len as u64, libc::PROT_READ)?;
                map_fd(&fd, len)
            }
            #[cfg(feature = "sim")]
            _ => Err(libc::EBADF),
        }
    }
}

/// `struct kinfo_vmentry`'s fields that [`parse_vmmap`] reads, at their
/// offsets (sys/user.h), and the values it looks for.
#[cfg_attr(not(target_os = "freebsd"), allow(dead_code))]
mod kve {
    pub const STRUCTSIZE: usize = 0;
    pub const TYPE: usize = 4;
    pub const START: usize = 8;
    pub const OFFSET: usize = 24;
    pub const PROTECTION: usize = 56;
    pub const PATH: usize = 136;
    /// `KVME_TYPE_VNODE`.
    pub const TYPE_VNODE: i32 = 2;
    /// `KVME_PROT_EXEC`.
    pub const PROT_EXEC: i32 = 4;
}

/// The executable vnode entries of a `kern.proc.vmmap` answer (packed
/// `struct kinfo_vmentry` records, each `kve_structsize` long, the path
/// cut after its NUL), as (where the object's start is mapped: the
/// entry's start less its offset in the file, path), each object once.
/// A record that does not fit stops the walk.
#[cfg_attr(not(target_os = "freebsd"), allow(dead_code))]
pub fn parse_vmmap(buf: &[u8]) -> Vec<(u64, String)> {
    let i32_at = |r: &[u8], o: usize| i32::from_ne_bytes(r[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |r: &[u8], o: usize| u64::from_ne_bytes(r[o..o + 8].try_into().expect("8 bytes"));
    let mut out: Vec<(u64, String)> = Vec::new();
    let mut rest = buf;
    while rest.len() > kve::PATH {
        let size = i32_at(rest, kve::STRUCTSIZE);
        let Ok(size) = usize::try_from(size) else {
            break;
        };
        if size <= kve::PATH || size > rest.len() {
            break;
        }
        let r = &rest[..size];
        rest = &rest[size..];
        if i32_at(r, kve::TYPE) != kve::TYPE_VNODE
            || i32_at(r, kve::PROTECTION) & kve::PROT_EXEC == 0
        {
            continue;
        }
        let path = &r[kve::PATH..];
        let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
        if path.is_empty() {
            continue;
        }
        let path = String::from_utf8_lossy(path).into_owned();
        if out.iter().any(|(_, p)| *p == path) {
            continue;
        }
        let base = u64_at(r, kve::START).wrapping_sub(u64_at(r, kve::OFFSET));
        out.push((base, path));
    }
    out
}

/// `kinfo_getvmmap(3)`'s sysctl, read as [`parse_vmmap`] reads it.
#[cfg(target_os = "freebsd")]
fn host_vmmap(pid: u32) -> Result<Vec<(u64, String)>, i32> {
    let mib = [
        libc::CTL_KERN,
        libc::KERN_PROC,
        libc::KERN_PROC_VMMAP,
        pid as libc::c_int,
    ];
    let mut len: libc::size_t = 0;
    // SAFETY: a size query: no buffer, `len` written.
    let rc = unsafe {
        libc::sysctl(
            mib.as_ptr(),
            4,
            std::ptr::null_mut(),
            &mut len,
            std::ptr::null(),
            0,
        )
    };
    if rc < 0 {
        return Err(pmctool::last_errno());
    }
    // Room for entries made since the query, as kinfo_getvmmap leaves.
    len = len * 4 / 3;
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` is `len` writable bytes; the kernel writes at most
    // `len` and says how many in `len`.
    let rc = unsafe {
        libc::sysctl(
            mib.as_ptr(),
            4,
            buf.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null(),
            0,
        )
    };
    if rc < 0 {
        return Err(pmctool::last_errno());
    }
    buf.truncate(len);
    Ok(parse_vmmap(&buf))
}

/// Elsewhere there is no FreeBSD process to ask.
#[cfg(not(target_os = "freebsd"))]
fn host_vmmap(_pid: u32) -> Result<Vec<(u64, String)>, i32> {
    Err(libc::ENOSYS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `struct kinfo_vmentry` record as the kernel packs it.
    fn entry(kind: i32, start: u64, offset: u64, prot: i32, path: &str) -> Vec<u8> {
        let size = (kve::PATH + path.len() + 1).next_multiple_of(8);
        let mut r = vec![0u8; size];
        r[kve::STRUCTSIZE..kve::STRUCTSIZE + 4].copy_from_slice(&(size as i32).to_ne_bytes());
        r[kve::TYPE..kve::TYPE + 4].copy_from_slice(&kind.to_ne_bytes());
        r[kve::START..kve::START + 8].copy_from_slice(&start.to_ne_bytes());
        r[kve::OFFSET..kve::OFFSET + 8].copy_from_slice(&offset.to_ne_bytes());
        r[kve::PROTECTION..kve::PROTECTION + 4].copy_from_slice(&prot.to_ne_bytes());
        r[kve::PATH..kve::PATH + path.len()].copy_from_slice(path.as_bytes());
        r
    }

    #[test]
    fn the_executable_vnode_entries_each_object_once() {
        let mut buf = Vec::new();
        // The program's text, after its read-only first page.
        buf.extend(entry(2, 0x20_0000, 0, 1, "/usr/bin/calls"));
        buf.extend(entry(2, 0x20_1000, 0x1000, 5, "/usr/bin/calls"));
        // Anonymous memory, executable: no object.
        buf.extend(entry(1, 0x30_0000, 0, 7, ""));
        // A library's text, then its data (not executable).
        buf.extend(entry(2, 0x8000_3000, 0x3000, 5, "/lib/libc.so.7"));
        buf.extend(entry(2, 0x8010_0000, 0x10_0000, 3, "/lib/libc.so.7"));
        // A second executable entry of the library.
        buf.extend(entry(2, 0x8020_0000, 0x20_0000, 5, "/lib/libc.so.7"));
        assert_eq!(
            parse_vmmap(&buf),
            vec![
                (0x20_0000, "/usr/bin/calls".to_string()),
                (0x8000_0000, "/lib/libc.so.7".to_string()),
            ]
        );
        // A record longer than what is left ends the walk, a short
        // buffer is nothing.
        let mut cut = entry(2, 0x20_1000, 0x1000, 5, "/usr/bin/calls");
        cut.truncate(cut.len() - 8);
        assert_eq!(parse_vmmap(&cut), Vec::new());
        assert_eq!(parse_vmmap(&[0u8; 16]), Vec::new());
        let mut bad = entry(2, 0x20_1000, 0x1000, 5, "/usr/bin/calls");
        bad[..4].copy_from_slice(&(-1i32).to_ne_bytes());
        assert_eq!(parse_vmmap(&bad), Vec::new());
    }
}

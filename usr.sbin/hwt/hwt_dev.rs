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

//! The socket under the protocol: stream Unix sockets, each packet its
//! length (u32, little-endian) and its bytes, descriptors as SCM_RIGHTS
//! beside a packet's first byte and, on Linux, the sender's credentials
//! as SCM_CREDENTIALS (the receiver turns SO_PASSCRED on, and the kernel
//! fills them in with the sender's ids at the time it sent).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::proto::MAX_PACKET;

/// Who sent a packet, as the host's kernel vouches for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Host pid.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// A packet as received, with what came beside it.
#[derive(Debug)]
pub struct Packet {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Descriptors passed with it.
    pub fds: Vec<OwnedFd>,
    /// The sender's credentials (Linux), when the socket passes them.
    pub cred: Option<PeerCred>,
}

fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// A new, unconnected stream socket, close-on-exec.
fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The address of `path`; a path starting with `@` is Linux's abstract
/// namespace (no file, gone with its listener).
fn address(path: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut a: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_bytes();
    if bytes.is_empty() || bytes.len() >= a.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path {path:?} is empty, too long or holds a NUL"),
        ));
    }
    for (d, s) in a.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    if bytes[0] == b'@' {
        a.sun_path[0] = 0;
    }
    let len = core::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len();
    Ok((a, len as libc::socklen_t))
}

/// A listening socket at `path`, with the file's mode `mode` (abstract
/// names have no file and no mode).
pub fn listen(path: &str, mode: u32) -> io::Result<OwnedFd> {
    let s = socket()?;
    let (a, len) = address(path)?;
    // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
    if unsafe { libc::bind(s.as_raw_fd(), (&raw const a).cast(), len) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if !path.starts_with('@') {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    // On the listener, so that a connection has it from its first byte
    // (a packet queued before the accepted socket had it would carry
    // "nobody", pid 0).
    pass_credentials(&s)?;
    // SAFETY: listen(2) on our socket.
    if unsafe { libc::listen(s.as_raw_fd(), 128) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

/// Accepts a connection, with credentials passed on every packet.
pub fn accept(listener: &OwnedFd) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: accept4 on our listening socket, with no address wanted.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: a new descriptor nothing else owns.
        let c = unsafe { OwnedFd::from_raw_fd(fd) };
        pass_credentials(&c)?;
        return Ok(c);
    }
}

#[cfg(target_os = "linux")]
fn pass_credentials(s: &OwnedFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: SO_PASSCRED takes an int.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&raw const on).cast(),
            core::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(r as isize).map(|_| ())
}

#[cfg(not(target_os = "linux"))]
fn pass_credentials(_: &OwnedFd) -> io::Result<()> {
    Ok(())
}

/// Connects to the daemon at `path`, close-on-exec: a new image makes a
/// connection of its own (the daemon keeps the process meanwhile), and
/// the programs a client starts do not hold its connection.
pub fn connect(path: &str) -> io::Result<OwnedFd> {
    let s = socket()?;
    let (a, len) = address(path)?;
    loop {
        // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
        if unsafe { libc::connect(s.as_raw_fd(), (&raw const a).cast(), len) } == 0 {
            return Ok(s);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends one packet (its length, then its bytes), with descriptor `fd`
/// beside its first byte when given.
pub fn send(s: RawFd, bytes: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    if bytes.len() > MAX_PACKET {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a packet larger than the protocol allows",
        ));
    }
    let mut framed = Vec::with_capacity(4 + bytes.len());
    framed.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    framed.extend_from_slice(bytes);
    let mut iov = libc::iovec {
        iov_base: framed.as_ptr() as *mut libc::c_void,
        iov_len: framed.len(),
    };
    // Room for the credentials' and one descriptor's control messages,
    // aligned as cmsghdr.
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    let used = write_credentials(&mut msg);
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(core::mem::size_of::<RawFd>() as u32) } as usize;
        assert!(used + space <= core::mem::size_of_val(&control));
        msg.msg_controllen = (used + space) as _;
        // SAFETY: the control buffer has room for `used + space` zeroed
        // bytes; the header after the credentials' (or the first) is
        // written with one descriptor.
        unsafe {
            let first = libc::CMSG_FIRSTHDR(&msg);
            let c = if used == 0 {
                first
            } else {
                libc::CMSG_NXTHDR(&msg, first)
            };
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(core::mem::size_of::<RawFd>() as u32) as _;
            core::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
    }
    if used == 0 && fd.is_none() {
        msg.msg_control = core::ptr::null_mut();
    }
    let mut sent = 0;
    while sent < framed.len() {
        iov.iov_base = framed[sent..].as_ptr() as *mut libc::c_void;
        iov.iov_len = framed.len() - sent;
        msg.msg_iov = &mut iov;
        // SAFETY: msg describes the unsent bytes and, until the first
        // byte has gone, the control buffer above.
        let r = unsafe { libc::sendmsg(s, &msg, libc::MSG_NOSIGNAL) };
        match cvt(r) {
            Ok(n) => {
                sent += n;
                msg.msg_control = core::ptr::null_mut();
                msg.msg_controllen = 0;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes this process's credentials as the first control message of
/// `msg` (whose control buffer has room); returns the bytes used. The
/// effective ids, which the host's kernel checks are ours (left to itself
/// it would attach the real ones): what FreeBSD's privilege checks use.
#[cfg(target_os = "linux")]
fn write_credentials(msg: &mut libc::msghdr) -> usize {
    // SAFETY: the id and pid calls have no preconditions.
    let me = unsafe {
        libc::ucred {
            pid: libc::getpid(),
            uid: libc::geteuid(),
            gid: libc::getegid(),
        }
    };
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(core::mem::size_of::<libc::ucred>() as u32) };
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points at zeroed room for this first header and
    // its data, which are written here.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_CREDENTIALS;
        (*c).cmsg_len = libc::CMSG_LEN(core::mem::size_of::<libc::ucred>() as u32) as _;
        core::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::ucred>(), me);
    }
    space as usize
}

/// Elsewhere the receiver asks the socket (getpeereid).
#[cfg(not(target_os = "linux"))]
fn write_credentials(_: &mut libc::msghdr) -> usize {
    0
}

/// Reads exactly `buf.len()` bytes with recvmsg, gathering the control
/// messages that come with them; false at the end of the stream before
/// the first byte.
fn recv_exact(
    s: RawFd,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    cred: &mut Option<PeerCred>,
) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let mut iov = libc::iovec {
            iov_base: buf[got..].as_mut_ptr().cast(),
            iov_len: buf.len() - got,
        };
        let mut control = [0u64; 32];
        // SAFETY: msghdr is plain data; all zeroes is a valid value.
        let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = core::mem::size_of_val(&control) as _;
        // SAFETY: msg describes the rest of `buf` and `control`, both
        // writable.
        let r = unsafe { libc::recvmsg(s, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        let n = match cvt(r) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        // SAFETY: the kernel wrote msg_controllen bytes of control
        // messages; CMSG_FIRSTHDR/NXTHDR walk them within that length, and
        // each descriptor received is owned here exactly once.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    for i in 0..len / core::mem::size_of::<RawFd>() {
                        let fd = core::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                #[cfg(target_os = "linux")]
                if (*c).cmsg_level == libc::SOL_SOCKET
                    && (*c).cmsg_type == libc::SCM_CREDENTIALS
                    && len >= core::mem::size_of::<libc::ucred>()
                {
                    let u = core::ptr::read_unaligned(data.cast::<libc::ucred>());
                    *cred = Some(PeerCred {
                        pid: u.pid as u32,
                        uid: u.uid,
                        gid: u.gid,
                    });
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "more control data than the protocol sends",
            ));
        }
        if n == 0 {
            if got == 0 {
                return Ok(false);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(true)
}

/// Receives one packet; None at the end of the connection. A length
/// larger than [`MAX_PACKET`] is an error, after which the stream is out
/// of step (the caller closes it).
pub fn recv(s: RawFd) -> io::Result<Option<Packet>> {
    let mut fds = Vec::new();
    let mut cred = None;
    let mut len = [0u8; 4];
    if !recv_exact(s, &mut len, &mut fds, &mut cred)? {
        return Ok(None);
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_PACKET {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a packet of {n} bytes, larger than the protocol allows"),
        ));
    }
    let mut bytes = vec![0u8; n];
    recv_exact(s, &mut bytes, &mut fds, &mut cred)?;
    Ok(Some(Packet { bytes, fds, cred }))
}

/// The credentials of the process at the other end, as they were when it
/// connected (SO_PEERCRED).
#[cfg(target_os = "linux")]
pub fn peer_cred(s: &OwnedFd) -> io::Result<PeerCred> {
    // SAFETY: ucred is plain data.
    let mut u: libc::ucred = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut u).cast(),
            &mut len,
        )
    };
    cvt(r as isize)?;
    Ok(PeerCred {
        pid: u.pid as u32,
        uid: u.uid,
        gid: u.gid,
    })
}

/// Elsewhere: the ids from getpeereid(3); the pid is unknown (0).
#[cfg(not(target_os = "linux"))]
pub fn peer_cred(s: &OwnedFd) -> io::Result<PeerCred> {
    let (mut uid, mut gid) = (0, 0);
    // SAFETY: getpeereid fills the two ids.
    let r = unsafe { libc::getpeereid(s.as_raw_fd(), &mut uid, &mut gid) };
    cvt(r as isize)?;
    Ok(PeerCred { pid: 0, uid, gid })
}

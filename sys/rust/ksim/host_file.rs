//! Files of the machine that are descriptors of the host
//! ([`crate::FileKind::Host`]): what ksimd's clients hand to
//! `pmc_configure_logfile`. The kernel's writer writes to them as
//! `fo_write` would, but never blocks the machine, and sees the host's
//! errors in FreeBSD's numbers.

use core::ffi::c_int;

/// FreeBSD's EAGAIN (35), which the machine's writers take as "blocked".
const EAGAIN_FREEBSD: i32 = 35;

/// Writes as much of `data` to host descriptor `fd` as it takes without
/// blocking: a pipe takes what it has room for, a socket what it takes
/// with MSG_DONTWAIT; nothing taken is EAGAIN (FreeBSD's number). Other
/// errors are the host's, as FreeBSD numbers them ([`freebsd_errno`]).
/// No SIGPIPE is raised for a pipe or socket with no reader: EPIPE is
/// returned, as the kernel's writer gets it.
pub fn write(fd: i32, data: &[u8]) -> Result<usize, i32> {
    if fd < 0 {
        return Err(freebsd_errno(libc::EBADF));
    }
    if data.is_empty() {
        return Ok(0);
    }
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable struct stat that fstat fills on success.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } < 0 {
        return Err(freebsd_errno(last_errno()));
    }
    // SAFETY: fstat succeeded, so it initialised `st`.
    let mode = unsafe { st.assume_init() }.st_mode & libc::S_IFMT;
    let n = match mode {
        libc::S_IFSOCK => {
            // SAFETY: `data` is readable for its length.
            unsafe {
                libc::send(
                    fd,
                    data.as_ptr().cast(),
                    data.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            }
        }
        libc::S_IFIFO => {
            let len = pipe_room(fd)?.min(data.len());
            if len == 0 {
                return Err(EAGAIN_FREEBSD);
            }
            without_sigpipe(|| {
                // SAFETY: `data` is readable for `len` <= its length.
                unsafe { libc::write(fd, data.as_ptr().cast(), len) }
            })
        }
        // SAFETY: `data` is readable for its length.
        _ => unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) },
    };
    if n < 0 {
        let e = last_errno();
        return Err(if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
            EAGAIN_FREEBSD
        } else {
            freebsd_errno(e)
        });
    }
    Ok(n as usize)
}

/// [`write`], waiting up to `limit` for the descriptor to take something
/// (a full pipe or socket whose reader is slow).
pub fn write_waiting(fd: i32, data: &[u8], limit: std::time::Duration) -> Result<usize, i32> {
    let start = std::time::Instant::now();
    loop {
        match write(fd, data) {
            Err(EAGAIN_FREEBSD) if start.elapsed() < limit => {
                // A pipe may report room before it has PIPE_BUF of it:
                // at most 10 ms, then the write is tried again.
                poll_out(fd, 10);
            }
            r => return r,
        }
    }
}

/// poll(2) of `fd` for writing, waiting at most `ms` milliseconds: the
/// events it reports.
fn poll_out(fd: i32, ms: c_int) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd, which poll fills.
    unsafe { libc::poll(&mut p, 1, ms) };
    p.revents
}

fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Bytes a pipe takes now without blocking; a pipe with no reader takes
/// one (its write then fails with EPIPE).
#[cfg(target_os = "linux")]
fn pipe_room(fd: i32) -> Result<usize, i32> {
    // SAFETY: F_GETPIPE_SZ only reads the pipe's capacity.
    let capacity = unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) };
    let mut unread: c_int = 0;
    // SAFETY: FIONREAD stores the unread byte count in `unread`.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut unread) };
    if capacity < 0 || r < 0 {
        return Err(freebsd_errno(last_errno()));
    }
    if poll_out(fd, 0) & libc::POLLERR != 0 {
        return Ok(1);
    }
    Ok((capacity - unread).max(0) as usize)
}

/// Elsewhere: PIPE_BUF bytes when poll says the pipe is writable.
#[cfg(not(target_os = "linux"))]
fn pipe_room(fd: i32) -> Result<usize, i32> {
    Ok(if poll_out(fd, 0) & (libc::POLLOUT | libc::POLLERR) != 0 {
        libc::PIPE_BUF
    } else {
        0
    })
}

/// Runs `f` (a write to a pipe) with SIGPIPE blocked on this thread, and
/// takes away a SIGPIPE it raised, so that the write fails with EPIPE
/// instead of killing the process that hosts the machine.
fn without_sigpipe(f: impl FnOnce() -> isize) -> isize {
    let mut pipe_only = core::mem::MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = core::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: the sets are initialised by sigemptyset before use, and
    // pthread_sigmask changes only this thread's mask, which is restored.
    unsafe {
        libc::sigemptyset(pipe_only.as_mut_ptr());
        libc::sigaddset(pipe_only.as_mut_ptr(), libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, pipe_only.as_ptr(), old.as_mut_ptr());
    }
    let n = f();
    let failed = n < 0 && last_errno() == libc::EPIPE;
    // SAFETY: as above; sigtimedwait with a zero timeout only takes the
    // pending SIGPIPE this write raised on this thread.
    unsafe {
        if failed {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(pipe_only.as_ptr(), core::ptr::null_mut(), &zero);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), core::ptr::null_mut());
    }
    if failed {
        // sigtimedwait may have changed errno.
        set_errno(libc::EPIPE);
    }
    n
}

#[cfg(target_os = "linux")]
fn set_errno(e: c_int) {
    // SAFETY: __errno_location is this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

#[cfg(not(target_os = "linux"))]
fn set_errno(_: c_int) {}

/// FreeBSD's errno value for a host errno value: the inverse of libpmc's
/// `host_errno` on the values both systems have (`sys/errno.h`); a value
/// FreeBSD has no name for becomes EIO (5). The identity on FreeBSD.
pub fn freebsd_errno(host: c_int) -> i32 {
    #[cfg(target_os = "linux")]
    {
        use libc::*;
        match host {
            EDEADLK => 11,
            EAGAIN => 35,
            1..=34 => host,
            EINPROGRESS => 36,
            EALREADY => 37,
            ENOTSOCK => 38,
            EDESTADDRREQ => 39,
            EMSGSIZE => 40,
            EPROTOTYPE => 41,
            ENOPROTOOPT => 42,
            EPROTONOSUPPORT => 43,
            ESOCKTNOSUPPORT => 44,
            EOPNOTSUPP => 45,
            EPFNOSUPPORT => 46,
            EAFNOSUPPORT => 47,
            EADDRINUSE => 48,
            EADDRNOTAVAIL => 49,
            ENETDOWN => 50,
            ENETUNREACH => 51,
            ENETRESET => 52,
            ECONNABORTED => 53,
            ECONNRESET => 54,
            ENOBUFS => 55,
            EISCONN => 56,
            ENOTCONN => 57,
            ESHUTDOWN => 58,
            ETOOMANYREFS => 59,
            ETIMEDOUT => 60,
            ECONNREFUSED => 61,
            ELOOP => 62,
            ENAMETOOLONG => 63,
            EHOSTDOWN => 64,
            EHOSTUNREACH => 65,
            ENOTEMPTY => 66,
            EUSERS => 68,
            EDQUOT => 69,
            ESTALE => 70,
            EREMOTE => 71,
            ENOLCK => 77,
            ENOSYS => 78,
            EIDRM => 82,
            ENOMSG => 83,
            EOVERFLOW => 84,
            ECANCELED => 85,
            EILSEQ => 86,
            ENODATA => 87,
            EBADMSG => 89,
            EMULTIHOP => 90,
            ENOLINK => 91,
            EPROTO => 92,
            ENOTRECOVERABLE => 95,
            EOWNERDEAD => 96,
            _ => 5,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        host
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn pipe() -> (i32, i32) {
        let mut fds = [0; 2];
        // Close-on-exec: a child another test spawns meanwhile must not
        // keep the read end open (the write would then be EAGAIN, not
        // EPIPE).
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        (fds[0], fds[1])
    }

    #[test]
    fn a_full_pipe_is_eagain_and_a_pipe_without_reader_is_epipe() {
        let (r, w) = pipe();
        let big = vec![7u8; 1 << 20];
        let mut taken = 0;
        loop {
            match write(w, &big) {
                Ok(n) => taken += n,
                Err(e) => {
                    assert_eq!(e, EAGAIN_FREEBSD);
                    break;
                }
            }
        }
        assert!(taken > 0 && taken < big.len(), "{taken}");
        // SAFETY: closing the read end this test made.
        unsafe { libc::close(r) };
        assert_eq!(write(w, b"x"), Err(32), "EPIPE, and no SIGPIPE killed us");
        // SAFETY: the write end this test made.
        unsafe { libc::close(w) };
        // Not `w` again: another test's open may have taken its number.
        assert_eq!(write(-1, b"x"), Err(9), "EBADF");
    }

    #[test]
    fn dev_full_is_enospc() {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        assert_eq!(write(f.as_raw_fd(), b"abc"), Err(28));
    }

    #[test]
    fn a_socket_without_room_is_eagain() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let big = vec![1u8; 1 << 16];
        let mut last = Ok(0);
        for _ in 0..1000 {
            last = write(a.as_raw_fd(), &big);
            if last.is_err() {
                break;
            }
        }
        assert_eq!(last, Err(EAGAIN_FREEBSD));
    }

    #[test]
    fn errno_values_are_freebsd_numbers() {
        assert_eq!(freebsd_errno(libc::ENOSPC), 28);
        assert_eq!(freebsd_errno(libc::EPIPE), 32);
        assert_eq!(freebsd_errno(libc::EAGAIN), 35);
        assert_eq!(freebsd_errno(libc::ECONNRESET), 54);
        assert_eq!(freebsd_errno(libc::EDEADLK), 11);
    }
}

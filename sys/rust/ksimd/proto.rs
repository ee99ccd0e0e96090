//! ksimd's protocol: what a client (libpmc's simulator transport) and the
//! daemon say to each other over a stream Unix socket.
//!
//! A request from the client is answered by exactly one reply from the
//! daemon, each one packet (see [`crate::sock`] for the framing). Every packet starts with the protocol's magic
//! and version ([`MAGIC`], [`VERSION`]) and a kind byte; integers are
//! little-endian; a byte string or text is a u32 length and its bytes.
//! A log descriptor travels beside a `Call` as SCM_RIGHTS, and every
//! packet carries the sender's credentials (SO_PASSCRED), which the
//! daemon reads as its client's pid, uid and gid.
//!
//! Errno values in replies are FreeBSD's: the client turns them into its
//! host's.

use core::fmt;

/// The first four bytes of every packet.
pub const MAGIC: [u8; 4] = *b"KSIM";
/// The protocol's version; a daemon refuses another.
pub const VERSION: u16 = 1;
/// The largest packet either side sends or takes: an argument block of
/// PMC_OP_GETPMCINFO for 256 CPUs is about 280 KiB.
pub const MAX_PACKET: usize = 16 * 1024 * 1024;

/// A client's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The first request of a connection: who the client is.
    Hello {
        /// The client's parent's host pid (getppid(2)); a daemon that can
        /// ask the host (Linux's /proc) believes the host instead.
        parent: u32,
        /// Clock ticks that pass before each of its hwpmc calls.
        ticks_per_call: u32,
        /// Its command name.
        comm: String,
        /// Its executable's path.
        path: String,
        /// What tells this image of the process from another: bytes the
        /// host's kernel draws anew at each exec (Linux's AT_RANDOM), 0
        /// when unknown. The same process with another image has exec'd.
        image: u64,
    },
    /// An hwpmc system call: `op` with its argument block (empty for a
    /// NULL argument); `with_fd` when a descriptor travels with it (the
    /// log of PMC_OP_CONFIGURELOG).
    Call {
        /// The PMC_OP_* operation.
        op: u32,
        /// The argument block.
        arg: Vec<u8>,
        /// A descriptor rides along as SCM_RIGHTS.
        with_fd: bool,
    },
    /// sysctlbyname(3) of a string node.
    Sysctl {
        /// The node's name.
        name: String,
    },
    /// Lets `ticks` clock ticks pass.
    Advance {
        /// Clock ticks.
        ticks: u32,
    },
    /// A child of the client's process, held before its exec (pmcstat's
    /// command): answered with [`Reply::Pid`].
    ForkHeld,
    /// Process `pid` execs the work program with `threads` threads and
    /// runs for `ticks` clock ticks, then exits.
    RunWork {
        /// The process.
        pid: u32,
        /// Its threads.
        threads: u32,
        /// Clock ticks until it exits.
        ticks: u64,
    },
    /// Whether the scheduler ran process `pid` to its end: [`Reply::Flag`],
    /// with ESRCH for a process it never ran.
    JobExited {
        /// The process.
        pid: u32,
    },
    /// Ends process `pid` (`held`: one that was never started).
    Kill {
        /// The process.
        pid: u32,
        /// It is held before its exec.
        held: bool,
    },
    /// The machine's processes: [`Reply::Processes`].
    Processes,
    /// The daemon's view of the machine: [`Reply::Status`].
    Status,
    /// open(2) of a device (`/dev/hwt`, a context's device) by the
    /// client's process: answered with [`Reply::Pid`] carrying a handle.
    DevOpen {
        /// The device's path.
        path: String,
        /// Open for writing as well as reading.
        write: bool,
    },
    /// ioctl(2) on an opened device. The argument block's pointer fields
    /// (one level deep) travel as regions: each names the offset of a
    /// pointer in `arg` and the bytes it points to, which the daemon puts
    /// in the process's memory, points the field at, and sends back after
    /// the call ([`Reply::Ioctled`]).
    DevIoctl {
        /// The handle [`Request::DevOpen`] gave.
        handle: u32,
        /// The ioctl command.
        cmd: u32,
        /// The argument block.
        arg: Vec<u8>,
        /// (offset of the pointer in `arg`, the memory it points to).
        regions: Vec<(u32, Vec<u8>)>,
    },
    /// mmap(2) of an opened device: answered with [`Reply::Done`] and the
    /// object's memory as a descriptor (SCM_RIGHTS) to map read-only.
    DevMmap {
        /// The handle.
        handle: u32,
        /// Offset.
        offset: u64,
        /// Length.
        size: u64,
        /// PROT_* bits.
        prot: i32,
    },
    /// Process `pid` (a held child) execs one of the machine's programs
    /// (`/usr/bin/NAME`) with `args` after its name, and runs until it
    /// exits.
    RunProgram {
        /// The process.
        pid: u32,
        /// The program's name.
        name: String,
        /// Its arguments after its name.
        args: Vec<String>,
    },
    /// The executable objects process `pid` has mapped, as the kernel
    /// sees them (`kinfo_getvmmap`'s executable vnode entries):
    /// [`Reply::Maps`].
    ProcMaps {
        /// The process.
        pid: u32,
    },
    /// The client is done with pmc(3) (its library closes): when this was
    /// its process's last connection, the process ends on the machine, as
    /// it does when the host process is gone. A connection that closes
    /// without it while its process lives (an exec(2) closed it) leaves
    /// the process, until the host says it is gone.
    Bye,
}

/// The daemon's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A request failed with this FreeBSD errno value.
    Error(i32),
    /// Done, nothing to say.
    Done,
    /// The answer to `Hello`.
    Welcome {
        /// The client's simulated pid (its host pid when it was free).
        pid: u32,
        /// Clock ticks per simulated second.
        hz: u64,
    },
    /// The answer to `DevIoctl`: the result (0 or a FreeBSD errno), the
    /// argument block and the regions as the driver left them.
    Ioctled {
        /// 0, or the FreeBSD errno.
        errno: i32,
        /// The argument block.
        arg: Vec<u8>,
        /// The regions, in the order asked.
        regions: Vec<Vec<u8>>,
    },
    /// The answer to `Call`: the argument block as the driver left it,
    /// the result (0 or a FreeBSD errno), and after a failure the
    /// `struct uexterror` the kernel copied out (empty if none).
    Called {
        /// 0, or the FreeBSD errno.
        errno: i32,
        /// The argument block.
        arg: Vec<u8>,
        /// The extended error's bytes, or nothing.
        exterr: Vec<u8>,
    },
    /// A string.
    Text(String),
    /// A pid.
    Pid(u32),
    /// Yes or no.
    Flag(bool),
    /// (pid, command name) of every process.
    Processes(Vec<(u32, String)>),
    /// (start, end, path) of each executable object a process mapped.
    Maps(Vec<(u64, u64, String)>),
    /// What the daemon knows of its machine.
    Status(Status),
}

/// The daemon's machine at a glance: what tests and operators check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Clients connected now.
    pub clients: u32,
    /// Processes of the machine (zombies included).
    pub processes: u32,
    /// Clock ticks since boot.
    pub ticks: u64,
    /// Violations the witness has seen.
    pub violations: u32,
    /// Kernel allocations live now.
    pub kmem_live: u64,
}

/// Why a packet could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not this protocol (the magic is wrong).
    BadMagic,
    /// Another version of it.
    Version(u16),
    /// An unknown kind byte.
    Kind(u8),
    /// The packet ends before its fields do.
    Truncated,
    /// Bytes are left after the last field.
    Trailing(usize),
    /// A text field is not UTF-8.
    NotText,
    /// A length is larger than the packet could hold.
    TooLong(u64),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::BadMagic => write!(f, "not a ksimd packet (bad magic)"),
            DecodeError::Version(v) => {
                write!(f, "protocol version {v}, this side speaks {VERSION}")
            }
            DecodeError::Kind(k) => write!(f, "unknown message kind {k}"),
            DecodeError::Truncated => write!(f, "truncated message"),
            DecodeError::Trailing(n) => write!(f, "{n} bytes after the message's end"),
            DecodeError::NotText => write!(f, "a text field is not UTF-8"),
            DecodeError::TooLong(n) => write!(f, "a length of {n} bytes is too long"),
        }
    }
}

impl std::error::Error for DecodeError {}

struct Writer(Vec<u8>);

impl Writer {
    fn new(kind: u8) -> Writer {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&MAGIC);
        v.extend_from_slice(&VERSION.to_le_bytes());
        v.push(kind);
        Writer(v)
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    fn done(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// Checks the header; returns the reader past it and the kind.
    fn open(packet: &'a [u8]) -> Result<(Reader<'a>, u8), DecodeError> {
        if packet.len() < 4 || packet[..4] != MAGIC {
            return Err(if packet.len() < 4 && MAGIC.starts_with(packet) {
                DecodeError::Truncated
            } else {
                DecodeError::BadMagic
            });
        }
        let mut r = Reader(&packet[4..]);
        let version = u16::from_le_bytes(r.take(2)?.try_into().unwrap());
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let kind = r.u8()?;
        Ok((r, kind))
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            k => Err(DecodeError::Kind(k)),
        }
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let n = self.u32()? as usize;
        if n > self.0.len() {
            return Err(if n > MAX_PACKET {
                DecodeError::TooLong(n as u64)
            } else {
                DecodeError::Truncated
            });
        }
        Ok(self.take(n)?.to_vec())
    }
    fn text(&mut self) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes()?).map_err(|_| DecodeError::NotText)
    }
    fn end<T>(self, v: T) -> Result<T, DecodeError> {
        if self.0.is_empty() {
            Ok(v)
        } else {
            Err(DecodeError::Trailing(self.0.len()))
        }
    }
}

impl Request {
    /// The packet that carries this request.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Hello {
                parent,
                ticks_per_call,
                comm,
                path,
                image,
            } => Writer::new(1)
                .u32(*parent)
                .u32(*ticks_per_call)
                .bytes(comm.as_bytes())
                .bytes(path.as_bytes())
                .u64(*image)
                .done(),
            Request::Call { op, arg, with_fd } => Writer::new(2)
                .u32(*op)
                .bytes(arg)
                .u8(u8::from(*with_fd))
                .done(),
            Request::Sysctl { name } => Writer::new(3).bytes(name.as_bytes()).done(),
            Request::Advance { ticks } => Writer::new(4).u32(*ticks).done(),
            Request::ForkHeld => Writer::new(5).done(),
            Request::RunWork {
                pid,
                threads,
                ticks,
            } => Writer::new(6).u32(*pid).u32(*threads).u64(*ticks).done(),
            Request::JobExited { pid } => Writer::new(7).u32(*pid).done(),
            Request::Kill { pid, held } => Writer::new(8).u32(*pid).u8(u8::from(*held)).done(),
            Request::Processes => Writer::new(9).done(),
            Request::Status => Writer::new(10).done(),
            Request::Bye => Writer::new(11).done(),
            Request::DevOpen { path, write } => Writer::new(12)
                .bytes(path.as_bytes())
                .u8(u8::from(*write))
                .done(),
            Request::DevIoctl {
                handle,
                cmd,
                arg,
                regions,
            } => {
                let mut w = Writer::new(13);
                w.u32(*handle)
                    .u32(*cmd)
                    .bytes(arg)
                    .u32(regions.len() as u32);
                for (at, bytes) in regions {
                    w.u32(*at).bytes(bytes);
                }
                w.done()
            }
            Request::DevMmap {
                handle,
                offset,
                size,
                prot,
            } => Writer::new(14)
                .u32(*handle)
                .u64(*offset)
                .u64(*size)
                .i32(*prot)
                .done(),
            Request::ProcMaps { pid } => Writer::new(16).u32(*pid).done(),
            Request::RunProgram { pid, name, args } => {
                let mut w = Writer::new(15);
                w.u32(*pid).bytes(name.as_bytes()).u32(args.len() as u32);
                for a in args {
                    w.bytes(a.as_bytes());
                }
                w.done()
            }
        }
    }

    /// Reads a request from a packet.
    pub fn decode(packet: &[u8]) -> Result<Request, DecodeError> {
        let (mut r, kind) = Reader::open(packet)?;
        let req = match kind {
            1 => Request::Hello {
                parent: r.u32()?,
                ticks_per_call: r.u32()?,
                comm: r.text()?,
                path: r.text()?,
                image: r.u64()?,
            },
            2 => Request::Call {
                op: r.u32()?,
                arg: r.bytes()?,
                with_fd: r.flag()?,
            },
            3 => Request::Sysctl { name: r.text()? },
            4 => Request::Advance { ticks: r.u32()? },
            5 => Request::ForkHeld,
            6 => Request::RunWork {
                pid: r.u32()?,
                threads: r.u32()?,
                ticks: r.u64()?,
            },
            7 => Request::JobExited { pid: r.u32()? },
            8 => Request::Kill {
                pid: r.u32()?,
                held: r.flag()?,
            },
            9 => Request::Processes,
            10 => Request::Status,
            11 => Request::Bye,
            12 => Request::DevOpen {
                path: r.text()?,
                write: r.flag()?,
            },
            13 => {
                let (handle, cmd, arg) = (r.u32()?, r.u32()?, r.bytes()?);
                let n = r.u32()? as usize;
                // Each region takes at least 8 bytes.
                if n > r.0.len() / 8 {
                    return Err(DecodeError::TooLong(n as u64));
                }
                let mut regions = Vec::with_capacity(n);
                for _ in 0..n {
                    regions.push((r.u32()?, r.bytes()?));
                }
                Request::DevIoctl {
                    handle,
                    cmd,
                    arg,
                    regions,
                }
            }
            14 => Request::DevMmap {
                handle: r.u32()?,
                offset: r.u64()?,
                size: r.u64()?,
                prot: r.i32()?,
            },
            15 => {
                let (pid, name) = (r.u32()?, r.text()?);
                let n = r.u32()? as usize;
                if n > r.0.len() / 4 {
                    return Err(DecodeError::TooLong(n as u64));
                }
                let mut args = Vec::with_capacity(n);
                for _ in 0..n {
                    args.push(r.text()?);
                }
                Request::RunProgram { pid, name, args }
            }
            16 => Request::ProcMaps { pid: r.u32()? },
            k => return Err(DecodeError::Kind(k)),
        };
        r.end(req)
    }
}

impl Reply {
    /// The packet that carries this reply.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Error(e) => Writer::new(0x80).i32(*e).done(),
            Reply::Done => Writer::new(0x81).done(),
            Reply::Welcome { pid, hz } => Writer::new(0x82).u32(*pid).u64(*hz).done(),
            Reply::Called { errno, arg, exterr } => Writer::new(0x83)
                .i32(*errno)
                .bytes(arg)
                .bytes(exterr)
                .done(),
            Reply::Text(s) => Writer::new(0x84).bytes(s.as_bytes()).done(),
            Reply::Pid(p) => Writer::new(0x85).u32(*p).done(),
            Reply::Flag(b) => Writer::new(0x86).u8(u8::from(*b)).done(),
            Reply::Processes(list) => {
                let mut w = Writer::new(0x87);
                w.u32(list.len() as u32);
                for (pid, comm) in list {
                    w.u32(*pid).bytes(comm.as_bytes());
                }
                w.done()
            }
            Reply::Maps(list) => {
                let mut w = Writer::new(0x8a);
                w.u32(list.len() as u32);
                for (start, end, path) in list {
                    w.u64(*start).u64(*end).bytes(path.as_bytes());
                }
                w.done()
            }
            Reply::Ioctled {
                errno,
                arg,
                regions,
            } => {
                let mut w = Writer::new(0x89);
                w.i32(*errno).bytes(arg).u32(regions.len() as u32);
                for r in regions {
                    w.bytes(r);
                }
                w.done()
            }
            Reply::Status(s) => Writer::new(0x88)
                .u32(s.clients)
                .u32(s.processes)
                .u64(s.ticks)
                .u32(s.violations)
                .u64(s.kmem_live)
                .done(),
        }
    }

    /// Reads a reply from a packet.
    pub fn decode(packet: &[u8]) -> Result<Reply, DecodeError> {
        let (mut r, kind) = Reader::open(packet)?;
        let reply = match kind {
            0x80 => Reply::Error(r.i32()?),
            0x81 => Reply::Done,
            0x82 => Reply::Welcome {
                pid: r.u32()?,
                hz: r.u64()?,
            },
            0x83 => Reply::Called {
                errno: r.i32()?,
                arg: r.bytes()?,
                exterr: r.bytes()?,
            },
            0x84 => Reply::Text(r.text()?),
            0x85 => Reply::Pid(r.u32()?),
            0x86 => Reply::Flag(r.flag()?),
            0x87 => {
                let n = r.u32()? as usize;
                // Each entry takes at least 8 bytes: no allocation beyond
                // what the packet can hold.
                if n > r.0.len() / 8 {
                    return Err(DecodeError::TooLong(n as u64));
                }
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    list.push((r.u32()?, r.text()?));
                }
                Reply::Processes(list)
            }
            0x8a => {
                let n = r.u32()? as usize;
                // Each entry takes at least 20 bytes.
                if n > r.0.len() / 20 {
                    return Err(DecodeError::TooLong(n as u64));
                }
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    list.push((r.u64()?, r.u64()?, r.text()?));
                }
                Reply::Maps(list)
            }
            0x88 => Reply::Status(Status {
                clients: r.u32()?,
                processes: r.u32()?,
                ticks: r.u64()?,
                violations: r.u32()?,
                kmem_live: r.u64()?,
            }),
            0x89 => {
                let (errno, arg) = (r.i32()?, r.bytes()?);
                let n = r.u32()? as usize;
                if n > r.0.len() / 4 {
                    return Err(DecodeError::TooLong(n as u64));
                }
                let mut regions = Vec::with_capacity(n);
                for _ in 0..n {
                    regions.push(r.bytes()?);
                }
                Reply::Ioctled {
                    errno,
                    arg,
                    regions,
                }
            }
            k => return Err(DecodeError::Kind(k)),
        };
        r.end(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests() -> Vec<Request> {
        vec![
            Request::DevOpen {
                path: "/dev/hwt_0_12".into(),
                write: true,
            },
            Request::DevIoctl {
                handle: 3,
                cmd: 0x8040_4200,
                arg: vec![0; 64],
                regions: vec![(32, b"pt\0".to_vec()), (40, vec![0xff; 4])],
            },
            Request::DevMmap {
                handle: 3,
                offset: 0,
                size: 1 << 20,
                prot: 1,
            },
            Request::RunProgram {
                pid: 12,
                name: "calls".into(),
                args: vec!["300".into(), "".into()],
            },
            Request::Hello {
                parent: 4242,
                ticks_per_call: 3,
                comm: "pmcstat".into(),
                path: "/usr/sbin/pmcstat".into(),
                image: 0x0123_4567_89ab_cdef,
            },
            Request::Call {
                op: 11,
                arg: vec![1, 2, 3, 0, 255],
                with_fd: true,
            },
            Request::Call {
                op: 0,
                arg: Vec::new(),
                with_fd: false,
            },
            Request::Sysctl {
                name: "kern.hwpmc.cpuid".into(),
            },
            Request::Advance { ticks: 1000 },
            Request::ForkHeld,
            Request::RunWork {
                pid: 7,
                threads: 4,
                ticks: 1 << 40,
            },
            Request::JobExited { pid: 9 },
            Request::Kill { pid: 9, held: true },
            Request::Processes,
            Request::ProcMaps { pid: 42 },
            Request::Status,
            Request::Bye,
        ]
    }

    fn replies() -> Vec<Reply> {
        vec![
            Reply::Ioctled {
                errno: 6,
                arg: vec![1, 2, 3],
                regions: vec![vec![], vec![9; 1056]],
            },
            Reply::Error(78),
            Reply::Done,
            Reply::Welcome {
                pid: 1234,
                hz: 1000,
            },
            Reply::Called {
                errno: 0,
                arg: vec![9; 40],
                exterr: vec![],
            },
            Reply::Text("GenuineIntel-6-5E-3".into()),
            Reply::Pid(55),
            Reply::Flag(true),
            Reply::Processes(vec![(1, "init".into()), (101, "pmcstat".into())]),
            Reply::Maps(vec![
                (0x20_0000, 0x20_5000, "/usr/bin/calls".into()),
                (0x8000_0000, 0x8000_2000, "/usr/lib/libsecond.so".into()),
            ]),
            Reply::Status(Status {
                clients: 3,
                processes: 9,
                ticks: 77,
                violations: 0,
                kmem_live: 12,
            }),
        ]
    }

    #[test]
    fn every_message_reads_back_as_written() {
        for r in requests() {
            assert_eq!(Request::decode(&r.encode()), Ok(r));
        }
        for r in replies() {
            assert_eq!(Reply::decode(&r.encode()), Ok(r));
        }
    }

    #[test]
    fn every_truncation_and_extension_is_an_error() {
        for r in requests() {
            let p = r.encode();
            for n in 0..p.len() {
                assert!(Request::decode(&p[..n]).is_err(), "{r:?} cut at {n}");
            }
            let mut longer = p.clone();
            longer.push(0);
            assert_eq!(Request::decode(&longer), Err(DecodeError::Trailing(1)));
        }
        for r in replies() {
            let p = r.encode();
            for n in 0..p.len() {
                assert!(Reply::decode(&p[..n]).is_err(), "{r:?} cut at {n}");
            }
        }
    }

    #[test]
    fn a_wrong_header_says_what_is_wrong() {
        let mut p = Request::Status.encode();
        p[4] = 2;
        assert_eq!(Request::decode(&p), Err(DecodeError::Version(2)));
        assert_eq!(Request::decode(b"HTTP/1.1"), Err(DecodeError::BadMagic));
        let mut p = Request::Status.encode();
        p[6] = 200;
        assert_eq!(Request::decode(&p), Err(DecodeError::Kind(200)));
        let mut p = Request::Kill {
            pid: 1,
            held: false,
        }
        .encode();
        *p.last_mut().unwrap() = 2;
        assert_eq!(Request::decode(&p), Err(DecodeError::Kind(2)));
        let mut p = Request::Sysctl { name: "x".into() }.encode();
        *p.last_mut().unwrap() = 0xff;
        assert_eq!(Request::decode(&p), Err(DecodeError::NotText));
        let mut p = Request::Sysctl { name: "x".into() }.encode();
        p[7..11].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Request::decode(&p),
            Err(DecodeError::TooLong(u64::from(u32::MAX)))
        );
        assert!(DecodeError::Version(2).to_string().contains("version 2"));
    }

    /// Seeded random bytes and mutated packets: an error or a request,
    /// never a panic (sys/rust/ksimd/fuzz runs the same under libFuzzer).
    #[test]
    fn random_packets_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds: Vec<Vec<u8>> = requests().iter().map(Request::encode).collect();
        for i in 0..200_000 {
            let mut p = if i % 2 == 0 {
                seeds[(next() as usize) % seeds.len()].clone()
            } else {
                let mut p = MAGIC.to_vec();
                p.extend_from_slice(&VERSION.to_le_bytes());
                p
            };
            for _ in 0..(next() % 4) {
                let at = (next() as usize) % (p.len() + 1);
                match next() % 3 {
                    0 if at < p.len() => p[at] = next() as u8,
                    1 => p.insert(at, next() as u8),
                    _ => p.truncate(at),
                }
            }
            let _ = Request::decode(&p);
            let _ = Reply::decode(&p);
        }
    }
}

/// FreeBSD's signal numbers and the host's, by name: (FreeBSD, Linux).
/// Realtime signals map in order: FreeBSD's SIGRTMIN (65) .. SIGRTMAX
/// (126) and the C library's SIGRTMIN (34) .. SIGRTMAX (64) on Linux.
#[cfg(target_os = "linux")]
const SIGNALS: [(i32, i32); 30] = [
    (1, 1),   // SIGHUP
    (2, 2),   // SIGINT
    (3, 3),   // SIGQUIT
    (4, 4),   // SIGILL
    (5, 5),   // SIGTRAP
    (6, 6),   // SIGABRT
    (8, 8),   // SIGFPE
    (9, 9),   // SIGKILL
    (10, 7),  // SIGBUS
    (11, 11), // SIGSEGV
    (12, 31), // SIGSYS
    (13, 13), // SIGPIPE
    (14, 14), // SIGALRM
    (15, 15), // SIGTERM
    (16, 23), // SIGURG
    (17, 19), // SIGSTOP
    (18, 20), // SIGTSTP
    (19, 18), // SIGCONT
    (20, 17), // SIGCHLD
    (21, 21), // SIGTTIN
    (22, 22), // SIGTTOU
    (23, 29), // SIGIO
    (24, 24), // SIGXCPU
    (25, 25), // SIGXFSZ
    (26, 26), // SIGVTALRM
    (27, 27), // SIGPROF
    (28, 28), // SIGWINCH
    (30, 10), // SIGUSR1
    (31, 12), // SIGUSR2
    (0, 0),
];
#[cfg(target_os = "linux")]
const FREEBSD_SIGRTMIN: i32 = 65;
#[cfg(target_os = "linux")]
const FREEBSD_SIGRTMAX: i32 = 126;
#[cfg(target_os = "linux")]
const HOST_SIGRTMIN: i32 = 34;
#[cfg(target_os = "linux")]
const HOST_SIGRTMAX: i32 = 64;

/// The host's number of FreeBSD signal `sig`; None for one the host does
/// not have (SIGEMT, SIGINFO, ...).
pub fn host_signal(sig: i32) -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        if (FREEBSD_SIGRTMIN..=FREEBSD_SIGRTMAX).contains(&sig) {
            let host = HOST_SIGRTMIN + (sig - FREEBSD_SIGRTMIN);
            return (host <= HOST_SIGRTMAX).then_some(host);
        }
        SIGNALS.iter().find(|&&(f, _)| f == sig).map(|&(_, h)| h)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Some(sig)
    }
}

/// FreeBSD's number of host signal `sig`; None for one FreeBSD does not
/// have (SIGSTKFLT, SIGPWR, glibc's own 32 and 33).
pub fn freebsd_signal(sig: i32) -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        if (HOST_SIGRTMIN..=HOST_SIGRTMAX).contains(&sig) {
            return Some(FREEBSD_SIGRTMIN + (sig - HOST_SIGRTMIN));
        }
        SIGNALS.iter().find(|&&(_, h)| h == sig).map(|&(f, _)| f)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Some(sig)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod signal_tests {
    use super::*;

    #[test]
    fn signal_numbers_map_both_ways_by_name() {
        assert_eq!(host_signal(30), Some(libc::SIGUSR1));
        assert_eq!(host_signal(23), Some(libc::SIGIO));
        assert_eq!(host_signal(20), Some(libc::SIGCHLD));
        assert_eq!(host_signal(65), Some(libc::SIGRTMIN()));
        assert_eq!(host_signal(65 + 30), Some(libc::SIGRTMAX()));
        assert_eq!(host_signal(126), None);
        assert_eq!(host_signal(29), None, "SIGINFO");
        for host in 1..=64 {
            if let Some(f) = freebsd_signal(host) {
                assert_eq!(host_signal(f), Some(host), "host {host} via FreeBSD {f}");
            }
        }
        assert_eq!(freebsd_signal(libc::SIGUSR2), Some(31));
        assert_eq!(freebsd_signal(16), None, "SIGSTKFLT");
    }
}

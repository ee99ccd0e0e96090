//! The simulator transport: the real hwpmc driver on a simulated FreeBSD
//! machine, reached through ksimd's protocol.
//!
//! With `LIBPMC_SIM_SOCKET` naming a running ksimd's socket, the program
//! is a client of that machine, which other programs share; without it,
//! the program starts a machine of its own on threads inside itself
//! (ksimd's private server, on a socket only it and its children reach)
//! and talks to it the same way. Either way the program's process is a
//! simulated process under its own pid and credentials; a child it forks
//! reconnects as that process's simulated child the first time it calls
//! pmc(3) (and is mirrored before that if a PMC is attached to it); the
//! connection is close-on-exec, and the process stays on the machine
//! across an exec(2) until its new image connects or it is gone; a log
//! descriptor goes to the machine as a real descriptor (SCM_RIGHTS),
//! which the driver's log writer writes to; errno values come back as
//! FreeBSD's and are turned into the host's here.

use core::ffi::c_int;
use core::sync::atomic::{AtomicI32, Ordering};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, Once};

use ksim::MachineConfig;
use ksimd::proto::{Reply, Request, Status};
use ksimd::server;
pub use ksimd::server::{DEFAULT_CPUID, SimConfig, Workload};
use ksimd::sock;
use uapi::Plain;
use uapi::exterr::Uexterror;
use uapi::pmc::{PMC_OP_EXT_NOTIFY, PmcOp, PmcOpConfigurelog, PmcOpNotify};

use crate::transport::{Transport, host_errno};

/// Environment variable with the socket of a running ksimd to use; without
/// it the program starts a machine of its own.
pub const SOCKET_ENV: &str = "LIBPMC_SIM_SOCKET";
/// Environment variable with the simulated machine's CPU count (a machine
/// of the program's own).
pub const CPUS_ENV: &str = "LIBPMC_SIM_CPUS";
/// Environment variable naming a workload to run on the machine:
/// `work` or `work:THREADS`, or a real program `[arm64/]NAME[:ARG,...]`
/// (see [`Workload`]).
pub const WORKLOAD_ENV: &str = "LIBPMC_SIM_WORKLOAD";
/// Environment variable that, when set and not empty, makes the machine
/// say on standard error what it is (CPUs, processes) when it boots.
pub const VERBOSE_ENV: &str = "LIBPMC_SIM_VERBOSE";
/// Environment variable with the clock ticks the program runs before each
/// of its hwpmc calls: how simulated time passes for a program that cannot
/// ask for it (default 0).
pub const TICKS_PER_CALL_ENV: &str = "LIBPMC_SIM_TICKS_PER_CALL";
/// Environment variable: the CPU key the machine reports in
/// `kern.hwpmc.cpuid` (e.g. `GenuineIntel-6-3C-3` for Haswell).
pub const CPUID_ENV: &str = "LIBPMC_SIM_CPUID";
/// Environment variable giving the simulated machine's kernel
/// environment (loader tunables such as `kern.hwpmc.logbuffersize`):
/// `NAME=VALUE` pairs separated by commas, set before hwpmc loads.
pub const KENV_ENV: &str = "LIBPMC_SIM_KENV";
/// A directory into which a private machine writes its files (programs,
/// libraries, kernel) once its workload has started, for `pmcstat -r`.
pub const FILES_ENV: &str = "LIBPMC_SIM_FILES";

/// The most clock ticks `LIBPMC_SIM_TICKS_PER_CALL` may ask for: 100
/// simulated seconds before each request (a fraction of a second of the
/// host's time). More would make every request seem to hang.
pub const MAX_TICKS_PER_CALL: u32 = 100_000;

/// Where `pm_fd` and the spare word that carries the host thread sit in
/// `struct pmc_op_notify`.
const NOTIFY_FD_AT: usize = core::mem::offset_of!(PmcOpNotify, pm_fd);
const NOTIFY_TID_AT: usize = core::mem::offset_of!(PmcOpNotify, pm_spare) + 4;

/// Where `pm_logfd` sits in `struct pmc_op_configurelog`.
const LOGFD_AT: usize = core::mem::offset_of!(PmcOpConfigurelog, pm_logfd);
const LOGFD_END: usize = LOGFD_AT + 4;

/// A variable's value; EINVAL when it is not text.
fn env_value(name: &str) -> Result<Option<String>, c_int> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(refuse(
            name,
            &v.to_string_lossy(),
            "text (it is not valid UTF-8)",
        )),
    }
}

/// Says on standard error which variable has what bad value, since
/// `pmc_init` can only answer EINVAL; returns EINVAL.
fn refuse(name: &str, value: &str, wanted: &str) -> c_int {
    eprintln!("libpmc: simulated machine: {name}={value:?} is not {wanted}");
    libc::EINVAL
}

fn getpid() -> u32 {
    // SAFETY: getpid(2) has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// The connections' descriptors, for the fork handler: a forked child
/// must never speak on its parent's connection, so the handler points
/// each at /dev/null in the child (no lock: it runs in the child of a fork
/// of any thread), and the child connects anew at its next request.
static CONNECTION_FDS: [AtomicI32; 64] = [const { AtomicI32::new(-1) }; 64];

extern "C" fn after_fork_in_child() {
    for slot in &CONNECTION_FDS {
        let fd = slot.load(Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: open, dup2 and close are async-signal-safe; the
            // slot's descriptor is replaced by /dev/null in this child
            // only (its connection object still owns the number).
            unsafe {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
                if null >= 0 {
                    libc::dup2(null, fd);
                    libc::close(null);
                }
            }
        }
    }
}

fn watch_forks(fd: RawFd) -> Option<usize> {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only runs async-signal-safe
        // calls in the child.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    CONNECTION_FDS.iter().position(|s| {
        s.compare_exchange(-1, fd, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    })
}

/// A connection to the machine, made by one process.
#[derive(Debug)]
struct Conn {
    fd: OwnedFd,
    /// The host pid that connected: another one is a forked child.
    host_pid: u32,
    /// This process on the machine.
    sim_pid: u32,
    slot: Option<usize>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            CONNECTION_FDS[i].store(-1, Ordering::Relaxed);
        }
    }
}

/// Sends `req` on `fd` (with descriptor `pass` beside it) and reads the
/// reply; ENXIO when the machine is gone or answers nonsense.
fn exchange(fd: RawFd, req: &Request, pass: Option<RawFd>) -> Result<Reply, c_int> {
    exchange_fds(fd, req, pass).map(|(r, _)| r)
}

/// [`exchange`], with the descriptors that came with the reply.
fn exchange_fds(
    fd: RawFd,
    req: &Request,
    pass: Option<RawFd>,
) -> Result<(Reply, Vec<OwnedFd>), c_int> {
    sock::send(fd, &req.encode(), pass).map_err(|_| libc::ENXIO)?;
    let packet = sock::recv(fd)
        .map_err(|_| libc::ENXIO)?
        .ok_or(libc::ENXIO)?;
    let reply = Reply::decode(&packet.bytes).map_err(|e| {
        eprintln!("libpmc: simulated machine: a reply it could not read: {e}");
        libc::ENXIO
    })?;
    Ok((reply, packet.fds))
}

/// The machine's real programs a command may name (ksim's workload
/// programs, `/usr/bin/NAME`).
pub const PROGRAMS: &[&str] = ksim::programs::NAMES;

/// The hwpmc driver on a simulated machine, through ksimd's protocol.
#[derive(Debug)]
pub struct SimTransport {
    socket: String,
    ticks_per_call: u32,
    comm: String,
    conn: Mutex<Option<Conn>>,
}

impl SimTransport {
    /// A client of the machine `LIBPMC_SIM_SOCKET` names, or of a machine
    /// of this program's own as `LIBPMC_SIM_CPUS`, `LIBPMC_SIM_WORKLOAD`,
    /// `LIBPMC_SIM_CPUID`, `LIBPMC_SIM_KENV` and `LIBPMC_SIM_VERBOSE`
    /// describe it; `LIBPMC_SIM_TICKS_PER_CALL` (default 0) either way.
    pub fn from_environment() -> Result<SimTransport, c_int> {
        let mut cfg = SimConfig::default();
        if let Some(v) = env_value(CPUS_ENV)? {
            cfg.cpus = match v.parse() {
                Ok(n) if (1..=256).contains(&n) => n,
                _ => return Err(refuse(CPUS_ENV, &v, "a number of CPUs from 1 to 256")),
            };
        }
        if let Some(v) = env_value(TICKS_PER_CALL_ENV)? {
            cfg.ticks_per_call = match v.parse() {
                Ok(n) if n <= MAX_TICKS_PER_CALL => n,
                _ => {
                    return Err(refuse(
                        TICKS_PER_CALL_ENV,
                        &v,
                        &format!("a number of clock ticks from 0 to {MAX_TICKS_PER_CALL}"),
                    ));
                }
            };
        }
        if let Some(v) = env_value(CPUID_ENV)? {
            cfg.cpuid = v;
        }
        if let Some(v) = env_value(KENV_ENV)? {
            for pair in v.split(',') {
                match pair.split_once('=') {
                    Some((name, value)) if !name.is_empty() => {
                        cfg.kenv.push((name.into(), value.into()));
                    }
                    _ => {
                        return Err(refuse(KENV_ENV, &v, "NAME=VALUE pairs separated by commas"));
                    }
                }
            }
        }
        cfg.verbose = env_value(VERBOSE_ENV)?.is_some_and(|v| !v.is_empty());
        if let Some(v) = env_value(WORKLOAD_ENV)? {
            cfg.workload = Some(
                Workload::parse(&v).ok_or_else(|| refuse(WORKLOAD_ENV, &v, &Workload::syntax()))?,
            );
        }
        if let Some(v) = env_value(FILES_ENV)? {
            cfg.files_dir = Some(v.into());
        }
        cfg.comm = program_name();
        if let Some(socket) = env_value(SOCKET_ENV)? {
            return SimTransport::connect(socket, cfg.ticks_per_call, cfg.comm);
        }
        SimTransport::boot(cfg)
    }

    /// Boots a machine of this program's own and connects to it.
    pub fn boot(cfg: SimConfig) -> Result<SimTransport, c_int> {
        let (ticks, comm, verbose, cpus) =
            (cfg.ticks_per_call, cfg.comm.clone(), cfg.verbose, cfg.cpus);
        let socket = server::start_private(cfg).map_err(|e| {
            eprintln!("libpmc: simulated machine: {e}");
            libc::ENXIO
        })?;
        let t = SimTransport::connect(socket, ticks, comm)?;
        if verbose {
            eprintln!(
                "libpmc: simulated machine: {cpus} CPUs; {} is pid {}",
                t.comm,
                t.program_pid()
            );
        }
        Ok(t)
    }

    /// A client of the machine served on `socket`.
    pub fn connect(
        socket: String,
        ticks_per_call: u32,
        comm: String,
    ) -> Result<SimTransport, c_int> {
        let t = SimTransport {
            socket,
            ticks_per_call,
            comm,
            conn: Mutex::new(None),
        };
        t.with_conn(|_| Ok(()))?;
        Ok(t)
    }

    /// Runs `f` with this process's connection, connecting first when
    /// there is none or it is the parent's (after a fork).
    fn with_conn<R>(&self, f: impl FnOnce(&Conn) -> Result<R, c_int>) -> Result<R, c_int> {
        let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let me = getpid();
        if guard.as_ref().is_none_or(|c| c.host_pid != me) {
            // The parent's connection (now /dev/null here) is dropped.
            *guard = None;
            // SAFETY: getppid(2) has no preconditions.
            let parent = unsafe { libc::getppid() } as u32;
            let fd = sock::connect(&self.socket).map_err(|e| {
                eprintln!(
                    "libpmc: simulated machine: cannot connect to {}: {e}",
                    self.socket
                );
                server::unreachable_errno(&e)
            })?;
            let hello = Request::Hello {
                parent,
                ticks_per_call: self.ticks_per_call,
                comm: self.comm.clone(),
                path: std::env::current_exe()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                image: image_id(),
            };
            let sim_pid = match exchange(fd.as_raw_fd(), &hello, None)? {
                Reply::Welcome { pid, .. } => pid,
                Reply::Error(e) => return Err(host_errno(e)),
                _ => return Err(libc::ENXIO),
            };
            let slot = watch_forks(fd.as_raw_fd());
            *guard = Some(Conn {
                fd,
                host_pid: me,
                sim_pid,
                slot,
            });
        }
        f(guard.as_ref().expect("connected above"))
    }

    /// One request and its reply; an error reply is the host's errno.
    fn request(&self, req: &Request) -> Result<Reply, c_int> {
        match self.with_conn(|c| exchange(c.fd.as_raw_fd(), req, None))? {
            Reply::Error(e) => Err(host_errno(e)),
            r => Ok(r),
        }
    }

    /// The pid of this program's own process on the machine.
    pub fn program_pid(&self) -> u32 {
        self.with_conn(|c| Ok(c.sim_pid)).unwrap_or(0)
    }

    /// Lets `ticks` clock ticks pass: the jobs run if any can, else this
    /// program itself (on CPU 0); on a machine whose clock follows the
    /// host's, waits until they have.
    pub fn advance(&self, ticks: u32) {
        let _ = self.request(&Request::Advance { ticks });
    }

    /// Lets `duration` of simulated time pass (at least one tick).
    pub fn sleep(&self, duration: std::time::Duration) {
        let ticks = (duration.as_nanos() * u128::from(Self::hz()) / 1_000_000_000).max(1);
        self.advance(u32::try_from(ticks).unwrap_or(u32::MAX));
    }

    /// Clock ticks per second of the simulated machine.
    pub fn hz() -> u64 {
        MachineConfig::default().hz
    }

    /// A child of this program's process, held before its exec (what
    /// pmcstat's command is until it starts).
    pub fn fork_held(&self) -> Result<u32, c_int> {
        match self.request(&Request::ForkHeld)? {
            Reply::Pid(p) => Ok(p),
            _ => Err(libc::ENXIO),
        }
    }

    /// Makes process `pid` (a held child) exec `/usr/bin/work` with
    /// `threads` threads ([`Workload::Work`]) and run until it exits after
    /// `ticks` clock ticks.
    pub fn run_work(&self, pid: u32, threads: u32, ticks: u64) -> Result<(), c_int> {
        self.request(&Request::RunWork {
            pid,
            threads,
            ticks,
        })
        .map(|_| ())
    }

    /// Whether the machine's scheduler ran process `pid` to its exit;
    /// `None` when it never ran it.
    pub fn job_exited(&self, pid: u32) -> Option<bool> {
        match self.request(&Request::JobExited { pid }) {
            Ok(Reply::Flag(b)) => Some(b),
            _ => None,
        }
    }

    /// Ends process `pid` now: a job of the scheduler, or a held child
    /// (`held`). ESRCH for any other process, or one that has exited.
    pub fn kill(&self, pid: u32, held: bool) -> Result<(), c_int> {
        self.request(&Request::Kill { pid, held }).map(|_| ())
    }

    /// The executable objects process `pid` has mapped, as (start, end,
    /// path): what `kinfo_getvmmap(3)` tells of its executable vnode
    /// entries on FreeBSD.
    pub fn proc_maps(&self, pid: u32) -> Result<Vec<(u64, u64, String)>, c_int> {
        match self.request(&Request::ProcMaps { pid })? {
            Reply::Maps(list) => Ok(list),
            _ => Err(libc::ENXIO),
        }
    }

    /// The machine's processes, as (pid, command name).
    pub fn processes(&self) -> Result<Vec<(u32, String)>, c_int> {
        match self.request(&Request::Processes)? {
            Reply::Processes(list) => Ok(list),
            _ => Err(libc::ENXIO),
        }
    }

    /// open(2) of a device of the machine (hwt(4)'s): a handle for the
    /// calls below.
    pub fn dev_open(&self, path: &str, write: bool) -> Result<u32, c_int> {
        match self.request(&Request::DevOpen {
            path: path.into(),
            write,
        })? {
            Reply::Pid(h) => Ok(h),
            _ => Err(libc::ENXIO),
        }
    }

    /// ioctl(2) on device `handle`: `arg` is the argument block, each
    /// region the memory a pointer field at an offset of it points to.
    /// Returns the regions as the driver left them; an error is the
    /// host's errno.
    pub fn dev_ioctl(
        &self,
        handle: u32,
        cmd: u32,
        arg: &[u8],
        regions: Vec<(u32, Vec<u8>)>,
    ) -> Result<Vec<Vec<u8>>, c_int> {
        match self.request(&Request::DevIoctl {
            handle,
            cmd,
            arg: arg.to_vec(),
            regions,
        })? {
            Reply::Ioctled {
                errno: 0, regions, ..
            } => Ok(regions),
            Reply::Ioctled { errno, .. } => Err(host_errno(errno)),
            _ => Err(libc::ENXIO),
        }
    }

    /// mmap(2) of device `handle`: a descriptor of the object's memory,
    /// for the caller to map (read-only).
    pub fn dev_mmap(
        &self,
        handle: u32,
        offset: u64,
        size: u64,
        prot: i32,
    ) -> Result<OwnedFd, c_int> {
        let req = Request::DevMmap {
            handle,
            offset,
            size,
            prot,
        };
        let (reply, mut fds) = self.with_conn(|c| exchange_fds(c.fd.as_raw_fd(), &req, None))?;
        match reply {
            Reply::Done => fds.pop().ok_or(libc::ENXIO),
            Reply::Error(e) => Err(host_errno(e)),
            _ => Err(libc::ENXIO),
        }
    }

    /// Makes held child `pid` exec the machine's program `name` with
    /// `args` after its name; it runs until it exits.
    pub fn run_program(&self, pid: u32, name: &str, args: &[String]) -> Result<(), c_int> {
        self.request(&Request::RunProgram {
            pid,
            name: name.into(),
            args: args.to_vec(),
        })
        .map(|_| ())
    }

    /// What the daemon says of its machine.
    pub fn status(&self) -> Result<Status, c_int> {
        match self.request(&Request::Status)? {
            Reply::Status(s) => Ok(s),
            _ => Err(libc::ENXIO),
        }
    }
}

/// What identifies this image of the process: the first bytes of the
/// random block the kernel gives each new image (AT_RANDOM), which a
/// forked child shares with its parent until it execs; 0 elsewhere.
#[cfg(target_os = "linux")]
fn image_id() -> u64 {
    // SAFETY: getauxval only reads the auxiliary vector.
    let at = unsafe { libc::getauxval(libc::AT_RANDOM) } as *const u8;
    if at.is_null() {
        return 0;
    }
    let mut b = [0u8; 8];
    // SAFETY: AT_RANDOM points at 16 bytes the kernel wrote, readable for
    // the life of the image.
    unsafe { core::ptr::copy_nonoverlapping(at, b.as_mut_ptr(), 8) };
    u64::from_ne_bytes(b)
}

#[cfg(not(target_os = "linux"))]
fn image_id() -> u64 {
    0
}

/// The program's name, as its simulated process's command.
fn program_name() -> String {
    std::env::args_os()
        .next()
        .map(|name| {
            let name = name.to_string_lossy().into_owned();
            let base = name.rsplit('/').next().unwrap_or(&name).to_string();
            base.chars().take(19).collect()
        })
        .unwrap_or_else(|| "pmcclient".into())
}

impl Drop for SimTransport {
    /// The library closes: this process is done with the machine (on the
    /// machine it ends, its PMCs and log released, once its last
    /// connection is gone).
    fn drop(&mut self) {
        let guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = guard.as_ref().filter(|c| c.host_pid == getpid()) {
            let _ = exchange(c.fd.as_raw_fd(), &Request::Bye, None);
        }
    }
}

impl Transport for SimTransport {
    fn call(&self, op: u32, arg: &mut [u8]) -> Result<(), c_int> {
        // The log's descriptor goes along when the program has it open.
        let logfd = (op == PmcOp::Configurelog.raw() && arg.len() >= LOGFD_END)
            .then(|| i32::from_ne_bytes(arg[LOGFD_AT..LOGFD_END].try_into().expect("4 bytes")))
            // SAFETY: fcntl(F_GETFD) only asks whether `fd` is open.
            .filter(|&fd| fd >= 0 && unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0);
        let notify = op == PMC_OP_EXT_NOTIFY && arg.len() == size_of::<PmcOpNotify>();
        let mut sent = arg.to_vec();
        if notify {
            // The machine sends this thread's signals to it: the daemon
            // learns which host thread it is from the last spare word,
            // which it clears before the kernel reads the request.
            // SAFETY: gettid(2) has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            sent[NOTIFY_TID_AT..NOTIFY_TID_AT + 4].copy_from_slice(&tid.to_ne_bytes());
        }
        let req = Request::Call {
            op,
            arg: sent,
            with_fd: logfd.is_some(),
        };
        let (reply, mut fds) = self.with_conn(|c| exchange_fds(c.fd.as_raw_fd(), &req, logfd))?;
        let Reply::Called {
            errno,
            arg: bytes,
            exterr,
        } = reply
        else {
            return Err(match reply {
                Reply::Error(e) => host_errno(e),
                _ => libc::ENXIO,
            });
        };
        if bytes.len() != arg.len() {
            return Err(libc::ENXIO);
        }
        arg.copy_from_slice(&bytes);
        if notify && errno == 0 {
            // The descriptor is the read end of a pipe the daemon feeds.
            let Some(fd) = fds.pop() else {
                return Err(libc::ENXIO);
            };
            let fd = fd.into_raw_fd();
            arg[NOTIFY_FD_AT..NOTIFY_FD_AT + 4].copy_from_slice(&fd.to_ne_bytes());
        }
        if let Some(ue) = Uexterror::read_from(&exterr) {
            crate::uexterr::record(ue);
        }
        // The driver's errno values are FreeBSD's.
        if errno == 0 {
            Ok(())
        } else {
            crate::transport::note_freebsd_errno(errno);
            Err(host_errno(errno))
        }
    }

    fn sysctl_string(&self, name: &str) -> Result<String, c_int> {
        match self.request(&Request::Sysctl {
            name: name.to_owned(),
        })? {
            Reply::Text(s) => Ok(s),
            _ => Err(libc::ENXIO),
        }
    }

    fn simulator(&self) -> Option<&SimTransport> {
        Some(self)
    }

    fn kernel_signal(&self, sig: c_int) -> Option<c_int> {
        ksimd::proto::freebsd_signal(sig)
    }
}

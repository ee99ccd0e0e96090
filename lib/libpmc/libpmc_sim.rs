//! The simulator transport: the real hwpmc driver on a simulated FreeBSD
//! machine, in this process.
//!
//! The machine lives on a thread of its own (it is not shareable), and the
//! transport talks to it over a channel, so libpmc's global state stays
//! `Send` and any thread of the program may call pmc(3). The calling
//! program is a root process of the simulated machine; its system calls
//! carry their argument block through the machine's user memory, as on
//! FreeBSD, and its thread has a `struct uexterror` registered, as libc
//! registers one, so that failed requests bring their extended error.
//! Other work on the machine (libpmcstat's processes) goes through
//! [`SimTransport::with_world`].

use core::ffi::c_int;
use core::mem::size_of;
use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};

use ksim::cpu::Arch;
use ksim::elf::{ImageBuilder, ImageKind};
use ksim::programs;
use ksim::workload::Program;
use ksim::{CpuState, Cred, FileKind, Machine, MachineConfig};
use uapi::exterr::{EXTERRCTL_ENABLE, UEXTERROR_VER, Uexterror};
use uapi::pmc::{PmcOp, PmcOpConfigurelog};
use uapi::{AsBytes, Plain};

use crate::transport::{Transport, host_errno};

/// Environment variable with the simulated machine's CPU count.
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

/// What the simulated machine looks like.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Number of CPUs, all present.
    pub cpus: u32,
    /// Name of the calling program's simulated process.
    pub comm: String,
    /// Clock ticks the program runs (on CPU 0) before each call.
    pub ticks_per_call: u32,
    /// A workload to run while time passes, instead of the program.
    pub workload: Option<Workload>,
    /// Describe the machine on standard error when it boots.
    pub verbose: bool,
    /// The CPU key `kern.hwpmc.cpuid` reports, which picks libpmc's
    /// PMU event table.
    pub cpuid: String,
    /// Kernel environment variables set before hwpmc loads.
    pub kenv: Vec<(String, String)>,
}

/// The workloads the simulated machine can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    /// `/usr/bin/work`: a process of `threads` threads computing in
    /// `compute` (50%), `hash` called from `compute` (30%), `io` (15%)
    /// and `main` (5%), every thread on its own random sequence.
    Work {
        /// Threads of the process (1 to 64).
        threads: u32,
    },
    /// One of ksim's real workload programs (`ksim::programs`), compiled
    /// for amd64 or arm64, run by the machine's CPUs as `/usr/bin/NAME`
    /// with the arguments given, until it exits.
    Program {
        /// The program's name.
        name: String,
        /// amd64 or arm64.
        arch: Arch,
        /// Its arguments after its name.
        args: Vec<String>,
    },
}

impl Workload {
    /// Parses `work` or `work:THREADS`, or `[arm64/]NAME[:ARG[,ARG...]]`
    /// for a program of ksim's.
    pub fn parse(spec: &str) -> Option<Workload> {
        let (name, rest) = spec
            .split_once(':')
            .map_or((spec, None), |(n, t)| (n, Some(t)));
        if name == "work" {
            let threads = match rest {
                None => 4,
                Some(t) => t.parse().ok().filter(|n| (1..=64).contains(n))?,
            };
            return Some(Workload::Work { threads });
        }
        let (arch, name) = match name.split_once('/') {
            Some(("amd64", n)) => (Arch::X86_64, n),
            Some(("arm64", n)) => (Arch::Aarch64, n),
            Some(_) => return None,
            None => (Arch::X86_64, name),
        };
        if !programs::NAMES.contains(&name) {
            return None;
        }
        let args = match rest {
            None => Vec::new(),
            Some(a) => a.split(',').map(String::from).collect(),
        };
        if args.iter().any(|a| a.is_empty() || a.len() > 64) || args.len() > 16 {
            return None;
        }
        Some(Workload::Program {
            name: name.into(),
            arch,
            args,
        })
    }

    /// Starts the workload on `m`: its process and threads, each with its
    /// program. Returns the process and its threads.
    fn start(&self, m: &Machine) -> Result<(u32, Vec<u32>), String> {
        match self {
            Workload::Work { threads } => {
                let (pid, _) = m.spawn(Cred::root(), "work");
                Ok((pid, run_work(m, pid, *threads)))
            }
            Workload::Program { name, arch, args } => {
                let image = programs::image(*arch, name)
                    .map_err(|e| format!("program {name} for {}: {e}", arch.name()))?;
                if name == "mapobj" {
                    let object = programs::image(*arch, programs::SECOND_OBJECT)
                        .map_err(|e| format!("{}: {e}", programs::SECOND_OBJECT))?;
                    m.install(programs::SECOND_OBJECT_PATH, object);
                }
                let (pid, tid) = m.spawn(Cred::root(), name);
                let mut argv = vec![name.as_str()];
                argv.extend(args.iter().map(String::as_str));
                m.exec_program(pid, &format!("/usr/bin/{name}"), &image, &argv)
                    .map_err(|e| format!("exec of {name}: {e}"))?;
                Ok((pid, vec![tid]))
            }
        }
    }

    /// What it is, for the machine's description.
    fn describe(&self, pid: u32) -> String {
        match self {
            Workload::Work { threads } => {
                format!("workload /usr/bin/work is pid {pid} with {threads} threads")
            }
            Workload::Program { name, arch, args } => {
                let mut argv = name.clone();
                for a in args {
                    argv += " ";
                    argv += a;
                }
                format!(
                    "workload /usr/bin/{name} ({} program: {argv}) is pid {pid}",
                    arch.name()
                )
            }
        }
    }
}

/// Makes process `pid` exec `/usr/bin/work` with `threads` threads, each
/// running the work program; returns the threads.
fn run_work(m: &Machine, pid: u32, threads: u32) -> Vec<u32> {
    let img = ImageBuilder::new("/usr/bin/work", ImageKind::Executable)
        .function("main", 64)
        .function("compute", 256)
        .function("hash", 128)
        .function("io", 96)
        .build();
    if m.read_file("/usr/bin/work").is_none() {
        m.install("/usr/bin/work", img.bytes.clone());
    }
    m.exec(pid, "/usr/bin/work", None);
    let mut tids = m.proc_info(pid).map(|p| p.threads).unwrap_or_default();
    tids.truncate(1);
    for _ in 1..threads {
        tids.push(m.thread_create(pid));
    }
    for (i, &tid) in tids.iter().enumerate() {
        let program = Program::builder(&img, 0, 0x5eed + u64::from(pid) * 64 + i as u64)
            .func("compute", 50, &["main"])
            .func("hash", 30, &["compute", "main"])
            .func("io", 15, &["main"])
            .func("main", 5, &[])
            .build();
        m.set_activity(tid, Box::new(program));
    }
    tids
}

/// A process the scheduler runs: the workload (forever), or a process
/// that exits after a number of ticks (pmcstat's command).
struct Job {
    pid: u32,
    threads: Vec<u32>,
    /// The tick at which the process exits.
    ends_at: Option<u64>,
    exited: bool,
}

/// Round-robin time sharing of the running jobs' threads over the online
/// CPUs, in slices of [`SLICE_TICKS`] clock ticks; jobs with an end exit
/// when their time is up.
struct Scheduler {
    jobs: Vec<Job>,
    cpus: u32,
    next: usize,
    now: u64,
}

/// Clock ticks a thread runs before the scheduler moves on.
const SLICE_TICKS: u32 = 10;

impl Scheduler {
    /// The threads of the jobs still running: a program's process may
    /// have made threads or ended them, or ended.
    fn runnable(&mut self, m: &Machine) -> Vec<u32> {
        for j in self.jobs.iter_mut().filter(|j| !j.exited) {
            match m.proc_info(j.pid) {
                Some(p) if !p.zombie => j.threads = p.threads,
                _ => j.exited = true,
            }
        }
        self.jobs
            .iter()
            .filter(|j| !j.exited)
            .flat_map(|j| j.threads.iter().copied())
            .collect()
    }

    /// Runs the jobs for `ticks` ticks, every CPU at once, and leaves the
    /// CPUs idle (the program's system calls need one).
    fn run(&mut self, m: &Machine, ticks: u32) {
        let mut left = u64::from(ticks);
        while left > 0 {
            let threads = self.runnable(m);
            let n = threads.len().min(self.cpus as usize);
            let placed: Vec<(u32, u32)> = (0..n)
                .map(|i| (i as u32, threads[(self.next + i) % threads.len()]))
                .collect();
            if !threads.is_empty() {
                self.next = (self.next + n) % threads.len();
            }
            for &(cpu, tid) in &placed {
                m.switch_in(cpu, tid);
            }
            let until_exit = self
                .jobs
                .iter()
                .filter(|j| !j.exited)
                .filter_map(|j| j.ends_at)
                .map(|t| t.saturating_sub(self.now))
                .min();
            let slice = left
                .min(u64::from(SLICE_TICKS))
                .min(until_exit.unwrap_or(u64::MAX))
                .max(1);
            for _ in 0..slice {
                m.tick_all();
            }
            for &(cpu, _) in &placed {
                m.switch_out(cpu);
            }
            self.now += slice;
            left -= slice;
            for j in self
                .jobs
                .iter_mut()
                .filter(|j| !j.exited && j.ends_at.is_some_and(|t| t <= self.now))
            {
                // A program may have ended by itself before its time.
                if m.proc_info(j.pid).is_some_and(|p| !p.zombie) {
                    m.exit(j.pid);
                }
                j.exited = true;
            }
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            cpus: 4,
            comm: "pmcclient".into(),
            ticks_per_call: 0,
            workload: None,
            verbose: false,
            cpuid: DEFAULT_CPUID.into(),
            kenv: Vec::new(),
        }
    }
}

/// The simulated machine's CPU key by default: a Skylake client part,
/// one of the models whose event tables the test data carries.
pub const DEFAULT_CPUID: &str = "GenuineIntel-6-5E-3";

/// Where `pm_logfd` sits in `struct pmc_op_configurelog`.
const LOGFD_AT: usize = core::mem::offset_of!(PmcOpConfigurelog, pm_logfd);
const LOGFD_END: usize = LOGFD_AT + 4;

/// What the simulated kernel should see for the program's descriptor
/// `fd`: the kind of file and whether it was opened for writing; None when
/// `fd` is not open.
fn host_file(fd: c_int) -> Option<(FileKind, bool)> {
    // SAFETY: fcntl(F_GETFL) only reads the descriptor's status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return None;
    }
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable struct stat that fstat fills on success.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } < 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it initialised `st`.
    let mode = unsafe { st.assume_init() }.st_mode & libc::S_IFMT;
    let kind = match mode {
        libc::S_IFDIR => FileKind::Directory,
        libc::S_IFIFO => FileKind::Pipe,
        libc::S_IFSOCK => FileKind::Socket,
        _ => FileKind::Regular,
    };
    Some((kind, flags & libc::O_ACCMODE != libc::O_RDONLY))
}

/// The program's log descriptor and the simulated file the driver writes:
/// what the driver has written is copied to the descriptor after every
/// request, so the program sees its log grow as on FreeBSD.
struct LogBridge {
    /// A duplicate of the program's descriptor (it may close its own).
    host_fd: c_int,
    file: u64,
    copied: usize,
}

impl LogBridge {
    fn new(fd: c_int, file: u64) -> Option<LogBridge> {
        // SAFETY: F_DUPFD_CLOEXEC on a descriptor host_file found open.
        let host_fd = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        (host_fd >= 0).then_some(LogBridge {
            host_fd,
            file,
            copied: 0,
        })
    }

    fn copy_out(&mut self, m: &Machine) {
        let data = m.file_data_from(self.file, self.copied);
        let mut rest = &data[..];
        while !rest.is_empty() {
            // SAFETY: `rest` is readable for its length; host_fd is ours.
            let n = unsafe { libc::write(self.host_fd, rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // The host refused the bytes: say so rather than lose them
                // silently.
                eprintln!(
                    "libpmc: simulator log copy to descriptor {}: {}",
                    self.host_fd,
                    std::io::Error::last_os_error()
                );
                break;
            }
            rest = &rest[n as usize..];
        }
        self.copied += data.len() - rest.len();
    }
}

impl Drop for LogBridge {
    fn drop(&mut self) {
        // SAFETY: the duplicate is ours and closed once.
        unsafe { libc::close(self.host_fd) };
    }
}

/// The most clock ticks `LIBPMC_SIM_TICKS_PER_CALL` may ask for: 100
/// simulated seconds before each request (a fraction of a second of the
/// host's time). More would make every request seem to hang.
pub const MAX_TICKS_PER_CALL: u32 = 100_000;

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

/// A request's argument block as the driver left it, its result, and
/// after a failure the `struct uexterror` the kernel copied out.
type CallReply = (Vec<u8>, Result<(), c_int>, Option<Uexterror>);

/// Work for the machine's thread, run with the machine at hand.
type WorldFn = Box<dyn FnOnce(&mut SimWorld<'_>) + Send>;

enum Request {
    Call {
        op: u32,
        arg: Vec<u8>,
        reply: Sender<CallReply>,
    },
    Advance {
        ticks: u32,
        reply: Sender<()>,
    },
    Sysctl {
        name: String,
        reply: Sender<Option<String>>,
    },
    World(WorldFn),
}

/// The simulated machine as its own thread holds it, for work sent with
/// [`SimTransport::with_world`]: what pmcstat's process control
/// (libpmcstat) does on the simulator, it does here.
pub struct SimWorld<'a> {
    machine: &'a Machine,
    program: u32,
    sched: &'a mut Scheduler,
}

impl core::fmt::Debug for SimWorld<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SimWorld")
            .field("program", &self.program)
            .field("now", &self.sched.now)
            .finish_non_exhaustive()
    }
}

impl SimWorld<'_> {
    /// The simulated machine.
    pub fn machine(&self) -> &Machine {
        self.machine
    }

    /// The pid of this program's own process on the machine.
    pub fn program_pid(&self) -> u32 {
        self.program
    }

    /// Clock ticks the machine has run since it booted.
    pub fn now(&self) -> u64 {
        self.sched.now
    }

    /// Makes process `pid` exec `/usr/bin/work` with `threads` threads,
    /// each running the work program (see [`Workload::Work`]), and has
    /// the scheduler run it until it exits after `ticks` clock ticks.
    pub fn run_work(&mut self, pid: u32, threads: u32, ticks: u64) {
        let tids = run_work(self.machine, pid, threads);
        self.sched.jobs.push(Job {
            pid,
            threads: tids,
            ends_at: Some(self.sched.now + ticks),
            exited: false,
        });
    }

    /// Ends process `pid` now: a job of the scheduler, or a process that
    /// is not one yet (`unscheduled`, e.g. a command held before its
    /// exec). ESRCH for any other process, or one that has exited.
    pub fn kill(&mut self, pid: u32, unscheduled: bool) -> Result<(), c_int> {
        match self.sched.jobs.iter_mut().find(|j| j.pid == pid) {
            Some(j) if !j.exited => {
                j.exited = true;
                self.machine.exit(pid);
                Ok(())
            }
            None if unscheduled => {
                self.machine.exit(pid);
                Ok(())
            }
            _ => Err(libc::ESRCH),
        }
    }

    /// Whether the scheduler has run process `pid` to its exit; `None`
    /// when the scheduler never ran it.
    pub fn job_exited(&self, pid: u32) -> Option<bool> {
        self.sched
            .jobs
            .iter()
            .find(|j| j.pid == pid)
            .map(|j| j.exited)
    }
}

/// A simulated machine with hwpmc loaded, and this program as one of its
/// processes.
#[derive(Debug)]
pub struct SimTransport {
    requests: Mutex<Sender<Request>>,
}

impl SimTransport {
    /// Boots a machine as `LIBPMC_SIM_CPUS` (default 4) and
    /// `LIBPMC_SIM_TICKS_PER_CALL` (default 0) describe it.
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
            cfg.workload = Some(Workload::parse(&v).ok_or_else(|| {
                refuse(
                    WORKLOAD_ENV,
                    &v,
                    &format!(
                        "work or work:THREADS (THREADS from 1 to 64), or a program \
                         [arm64/]NAME[:ARG,...] with NAME one of {}",
                        programs::NAMES.join(", ")
                    ),
                )
            })?);
        }
        if let Some(name) = std::env::args_os().next() {
            let name = name.to_string_lossy();
            let base = name.rsplit('/').next().unwrap_or(&name);
            cfg.comm = base.chars().take(19).collect();
        }
        SimTransport::boot(cfg)
    }

    /// Boots a machine, loads hwpmc on it and starts this program's
    /// process; the errno of the module load on failure.
    pub fn boot(cfg: SimConfig) -> Result<SimTransport, c_int> {
        let (tx, rx) = channel::<Request>();
        let (ready_tx, ready_rx) = channel::<Result<(), c_int>>();
        std::thread::Builder::new()
            .name("ksim".into())
            .spawn(move || {
                let machine_cfg = MachineConfig {
                    cpus: vec![CpuState::Online; cfg.cpus as usize],
                    cpuid: cfg.cpuid.clone(),
                    ..MachineConfig::default()
                };
                let m = Machine::new(machine_cfg);
                for (name, value) in &cfg.kenv {
                    m.kenv_set(name, value);
                }
                let _entered = m.enter();
                let (_, kld) = m.spawn(Cred::root(), "kldload");
                let module = match m.in_thread(kld, hwpmc::Module::load) {
                    Ok(module) => module,
                    Err(e) => {
                        let _ = ready_tx.send(Err(host_errno(e.get())));
                        return;
                    }
                };
                let sysnum = module.syscall_number();
                let (pid, tid) = m.spawn(Cred::root(), &cfg.comm);
                // As FreeBSD's libc does for each thread: a struct
                // uexterror, registered with exterrctl(2), that the kernel
                // fills when a system call fails.
                let uexterror = m.user_alloc(pid, size_of::<Uexterror>());
                let registration = Uexterror {
                    ver: UEXTERROR_VER,
                    ..Uexterror::default()
                };
                m.user_write(pid, uexterror, registration.as_bytes());
                if let Err(e) = m.exterrctl(tid, EXTERRCTL_ENABLE, 0, uexterror) {
                    let _ = ready_tx.send(Err(host_errno(e)));
                    return;
                }
                let mut log: Option<LogBridge> = None;
                let mut sched = Scheduler {
                    jobs: Vec::new(),
                    cpus: cfg.cpus,
                    next: 0,
                    now: 0,
                };
                if let Some(w) = &cfg.workload {
                    let (wpid, threads) = match w.start(&m) {
                        Ok(started) => started,
                        Err(e) => {
                            eprintln!("libpmc: simulated machine: workload: {e}");
                            let _ = ready_tx.send(Err(libc::EINVAL));
                            return;
                        }
                    };
                    sched.jobs.push(Job {
                        pid: wpid,
                        threads,
                        ends_at: None,
                        exited: false,
                    });
                }
                if cfg.verbose {
                    let mut what = format!(
                        "libpmc: simulated machine: {} CPUs; {} is pid {pid}",
                        cfg.cpus, cfg.comm
                    );
                    if let (Some(w), Some(j)) = (&cfg.workload, sched.jobs.first()) {
                        what += "; ";
                        what += &w.describe(j.pid);
                    }
                    eprintln!("{what}");
                }
                // Time passes: the jobs run if any can, else the program
                // itself, on CPU 0.
                let pass = |m: &Machine, sched: &mut Scheduler, ticks: u32| {
                    if sched.runnable(m).is_empty() {
                        m.run(tid, 0, ticks);
                        sched.now += u64::from(ticks);
                    } else {
                        sched.run(m, ticks);
                    }
                };
                let _ = ready_tx.send(Ok(()));
                // Serve until every transport is gone; the module stays
                // loaded for as long as the program can call it.
                for req in rx {
                    match req {
                        Request::Call { op, mut arg, reply } => {
                            if cfg.ticks_per_call > 0 {
                                pass(&m, &mut sched, cfg.ticks_per_call);
                            }
                            // A log descriptor is one of the program's: the
                            // simulated process gets a file standing for it.
                            let configure = (op == PmcOp::Configurelog.raw()
                                && arg.len() >= LOGFD_END)
                                .then(|| {
                                    i32::from_ne_bytes(
                                        arg[LOGFD_AT..LOGFD_END].try_into().expect("4 bytes"),
                                    )
                                });
                            let standin = configure.filter(|&fd| fd >= 0).map(|fd| {
                                let sim_fd = match host_file(fd) {
                                    Some((kind, writable)) => m.open(pid, kind, writable),
                                    // Not open here: a descriptor the
                                    // simulated process does not have either.
                                    None => i32::MAX - 1,
                                };
                                arg[LOGFD_AT..LOGFD_END].copy_from_slice(&sim_fd.to_ne_bytes());
                                (fd, sim_fd)
                            });
                            let uaddr = if arg.is_empty() {
                                0
                            } else {
                                m.user_alloc(pid, arg.len())
                            };
                            if !arg.is_empty() {
                                m.user_write(pid, uaddr, &arg);
                            }
                            let r = m.syscall(tid, sysnum, &[u64::from(op), uaddr]);
                            if !arg.is_empty() {
                                arg = m.user_read(pid, uaddr, arg.len());
                            }
                            if let Some((fd, sim_fd)) = standin {
                                arg[LOGFD_AT..LOGFD_END].copy_from_slice(&fd.to_ne_bytes());
                                if r.is_ok() {
                                    let file =
                                        m.file_of(pid, sim_fd).expect("the stand-in is open");
                                    log = LogBridge::new(fd, file);
                                }
                                // The kernel keeps its reference, as after
                                // a close(2) of the program's descriptor.
                                if m.file_of(pid, sim_fd).is_some() {
                                    m.close(pid, sim_fd);
                                }
                            }
                            if let Some(bridge) = log.as_mut() {
                                bridge.copy_out(&m);
                            }
                            let log_ended =
                                r.is_ok() && (op == PmcOp::Closelog.raw() || configure == Some(-1));
                            if log_ended {
                                log = None;
                            }
                            let exterr = r.is_err().then(|| {
                                let bytes = m.user_read(pid, uexterror, size_of::<Uexterror>());
                                Uexterror::read_from(&bytes).expect("whole struct")
                            });
                            let _ = reply.send((arg, r.map(|_| ()), exterr));
                        }
                        Request::Advance { ticks, reply } => {
                            pass(&m, &mut sched, ticks);
                            if let Some(bridge) = log.as_mut() {
                                bridge.copy_out(&m);
                            }
                            let _ = reply.send(());
                        }
                        Request::World(work) => {
                            work(&mut SimWorld {
                                machine: &m,
                                program: pid,
                                sched: &mut sched,
                            });
                            if let Some(bridge) = log.as_mut() {
                                bridge.copy_out(&m);
                            }
                        }
                        Request::Sysctl { name, reply } => {
                            let _ = reply.send(m.sysctl_str(&name));
                        }
                    }
                }
                let (_, unload) = m.spawn(Cred::root(), "kldunload");
                m.in_thread(unload, || module.unload());
            })
            .map_err(|_| libc::EAGAIN)?;
        ready_rx.recv().map_err(|_| libc::ENXIO)??;
        Ok(SimTransport {
            requests: Mutex::new(tx),
        })
    }

    fn send(&self, req: Request) -> Result<(), c_int> {
        let tx = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        tx.send(req).map_err(|_| libc::ENXIO)
    }
}

impl SimTransport {
    /// Runs `work` on the machine's thread with the machine at hand, and
    /// returns what it returns; ENXIO when the machine is gone.
    pub fn with_world<R: Send + 'static>(
        &self,
        work: impl FnOnce(&mut SimWorld<'_>) -> R + Send + 'static,
    ) -> Result<R, c_int> {
        let (reply, answer) = channel();
        self.send(Request::World(Box::new(move |w| {
            let _ = reply.send(work(w));
        })))?;
        answer.recv().map_err(|_| libc::ENXIO)
    }

    /// Lets `ticks` clock ticks pass: the jobs run if any can, else this
    /// program itself (on CPU 0).
    pub fn advance(&self, ticks: u32) {
        let (reply, answer) = channel();
        if self.send(Request::Advance { ticks, reply }).is_ok() {
            let _ = answer.recv();
        }
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
}

impl Transport for SimTransport {
    fn call(&self, op: u32, arg: &mut [u8]) -> Result<(), c_int> {
        let (reply, answer) = channel();
        self.send(Request::Call {
            op,
            arg: arg.to_vec(),
            reply,
        })?;
        let (bytes, result, exterr) = answer.recv().map_err(|_| libc::ENXIO)?;
        arg.copy_from_slice(&bytes);
        if let Some(ue) = exterr {
            crate::uexterr::record(ue);
        }
        // The driver's errno values are FreeBSD's.
        result.map_err(host_errno)
    }

    fn sysctl_string(&self, name: &str) -> Result<String, c_int> {
        let (reply, answer) = channel();
        self.send(Request::Sysctl {
            name: name.to_owned(),
            reply,
        })?;
        answer.recv().map_err(|_| libc::ENXIO)?.ok_or(libc::ENOENT)
    }

    fn simulator(&self) -> Option<&SimTransport> {
        Some(self)
    }
}

//! The daemon's machine: one simulated FreeBSD machine with hwpmc loaded,
//! served to the host processes that connect to it.
//!
//! The machine is not shareable, so one thread owns it and serves the
//! work that the connection threads (one per client) and the clock send
//! it over a channel, one piece at a time, in the order it came.
//!
//! Host processes are mirrored: a connecting process becomes a simulated
//! process under its own host pid (when the machine has it free; the
//! machine's own processes have pids above the host's range), with its
//! uid and gid from the credentials the host's kernel attaches to every
//! packet (a setuid(2) shows on the next one). A child that forked from a
//! client connects naming its parent and becomes the simulated child of
//! that process (the fork hooks run: PMC inheritance, PMC_F_DESCENDANTS);
//! a child that has not connected yet is mirrored as soon as a client
//! attaches a PMC to it. A process ends, with its exit hooks, when its
//! last connection closes or the host says it is gone.

use core::ffi::c_int;
use core::mem::size_of;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use ksim::cpu::Arch;
use ksim::elf::{ImageBuilder, ImageKind};
use ksim::programs;
use ksim::workload::Program;
use ksim::{CpuState, Cred, FileKind, Machine, MachineConfig, NotifyRead};
use uapi::exterr::{EXTERRCTL_ENABLE, EXTERRCTLF_FORCE, UEXTERROR_VER, Uexterror};
use uapi::pmc::{PMC_OP_EXT_NOTIFY, PmcOp, PmcOpConfigurelog, PmcOpNotify, PmcOpPmcattach};
use uapi::{AsBytes, Plain};

use crate::proto::{Reply, Request, Status};
use crate::sock::{self, PeerCred};

/// FreeBSD's errno values the daemon answers with.
mod errno {
    pub const EPERM: i32 = 1;
    pub const ESRCH: i32 = 3;
    pub const EBADF: i32 = 9;
    pub const EMFILE: i32 = 24;
    pub const EINVAL: i32 = 22;
    pub const EPROTO: i32 = 92;
    pub const ENOENT: i32 = 2;
    pub const ENODEV: i32 = 19;
    pub const ENOEXEC: i32 = 8;
    pub const EBUSY: i32 = 16;
}

/// What the simulated machine looks like.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Number of CPUs, all present.
    pub cpus: u32,
    /// Name of the client's simulated process (a private machine's).
    pub comm: String,
    /// Clock ticks a client runs (on CPU 0) before each of its calls.
    pub ticks_per_call: u32,
    /// A workload to run while time passes.
    pub workload: Option<Workload>,
    /// Describe the machine on standard error when it boots.
    pub verbose: bool,
    /// The CPU key `kern.hwpmc.cpuid` reports, which picks libpmc's
    /// PMU event table.
    pub cpuid: String,
    /// Kernel environment variables set before hwpmc loads.
    pub kenv: Vec<(String, String)>,
    /// Simulated seconds per host second: 0 lets time pass only when a
    /// client asks for it (or makes a call with `ticks_per_call`).
    pub rate: f64,
    /// A directory to write the machine's files into once the workload
    /// has started (its programs, libraries and kernel, at their paths),
    /// for an analysis of its logs with `pmcstat -r`.
    pub files_dir: Option<std::path::PathBuf>,
}

/// The simulated machine's CPU key by default: a Skylake client part,
/// one of the models whose event tables the test data carries.
pub const DEFAULT_CPUID: &str = "GenuineIntel-6-5E-3";

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
            rate: 0.0,
            files_dir: None,
        }
    }
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

    /// What `parse` takes, for messages.
    pub fn syntax() -> String {
        format!(
            "work or work:THREADS (THREADS from 1 to 64), or a program \
             [arm64/]NAME[:ARG,...] with NAME one of {}",
            programs::NAMES.join(", ")
        )
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
    /// CPUs idle (the clients' system calls need one).
    fn run(&mut self, m: &Machine, ticks: u64) {
        let mut left = ticks;
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

/// Where `pm_logfd` sits in `struct pmc_op_configurelog`.
const LOGFD_AT: usize = core::mem::offset_of!(PmcOpConfigurelog, pm_logfd);
const LOGFD_END: usize = LOGFD_AT + 4;
/// Where `pm_pid` sits in `struct pmc_op_pmcattach` (and detach).
const PID_AT: usize = core::mem::offset_of!(PmcOpPmcattach, pm_pid);
const PID_END: usize = PID_AT + 4;

/// A descriptor number no simulated process has: what a client's closed
/// log descriptor becomes, so that the driver answers EBADF itself.
const NO_SUCH_FD: i32 = i32::MAX - 1;

/// Identifies a connection.
pub type ConnId = u64;

/// A host process mirrored on the machine.
#[derive(Debug)]
struct Client {
    /// Its host pid (0 when the host could not say).
    host_pid: u32,
    /// Its main thread on the machine.
    tid: u32,
    /// Where its thread's `struct uexterror` is, in its user memory.
    uexterror: u64,
    /// Its connections open now.
    conns: u32,
    /// Clock ticks it runs before each of its calls.
    ticks_per_call: u32,
    /// What the host said of it when it was mirrored, to tell it from a
    /// later process under the same pid.
    start_time: Option<u64>,
    /// Its image as its last hello named it (a forked child's is its
    /// parent's until it execs); 0 when unknown.
    image: u64,
}

impl Client {
    /// Whether the host says its process is gone (or another process has
    /// its pid now); never for a client whose host pid is unknown.
    fn host_gone(&self) -> bool {
        self.host_pid != 0 && host_process(self.host_pid).map(|(_, t)| t) != self.start_time
    }
}

/// Where a reply goes, with a descriptor to pass beside it.
pub(crate) type ReplyTx = Sender<(Reply, Option<OwnedFd>)>;

/// A notification descriptor of a client's simulated process, mirrored by
/// the read end of a host pipe the client got: the records its kernel
/// file takes go down the pipe, and its end closes the pipe.
#[derive(Debug)]
struct NotifyBridge {
    /// The kernel file.
    file: u64,
    /// The pipe's write end (non-blocking).
    pipe: OwnedFd,
    /// A record the pipe had no room for, sent before any newer one.
    unsent: Option<Vec<u8>>,
    /// The file hung up: the pipe closes once `unsent` is out.
    ended: bool,
}

/// Work for the machine's thread.
pub(crate) enum Work {
    /// A request of connection `conn`, with the sender's credentials and
    /// any descriptor that came with it.
    Request {
        conn: ConnId,
        cred: PeerCred,
        req: Request,
        fd: Option<OwnedFd>,
        reply: ReplyTx,
    },
    /// A connection closed.
    Disconnect { conn: ConnId },
    /// Host time passed: the clock's share of ticks is due.
    Clock,
    /// Stop: the clients end, hwpmc unloads, and the reply says what the
    /// machine's checks found.
    Shutdown { reply: Sender<Outcome> },
}

/// What the machine's checks found when it stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The witness's violations, as text.
    pub violations: Vec<String>,
    /// Kernel allocations left, and their bytes.
    pub leaked: (usize, usize),
}

impl Outcome {
    /// Whether everything held.
    pub fn clean(&self) -> bool {
        self.violations.is_empty() && self.leaked.0 == 0
    }
}

/// The machine and everything its thread keeps.
struct Host {
    m: Machine,
    module: hwpmc::Module,
    /// hwt(4) and, on a CPU with Intel PT, its PT backend (unloaded
    /// first).
    trace: Option<(Option<intel_pt::Module>, hwt::Module)>,
    /// Devices the clients opened: handle to (simulated pid, descriptor).
    devs: BTreeMap<u32, (u32, ksim::DevFd)>,
    /// Reusable user memory of each client for ioctl regions: (address,
    /// size) by pid.
    scratch: BTreeMap<u32, Vec<(u64, usize)>>,
    sysnum: u32,
    sched: Scheduler,
    cfg: SimConfig,
    /// Mirrored processes, by simulated pid.
    clients: BTreeMap<u32, Client>,
    /// The simulated pid of each connection that said hello.
    conns: BTreeMap<ConnId, u32>,
    /// Connections that said goodbye.
    leaving: std::collections::BTreeSet<ConnId>,
    /// Advance requests waiting for the clock (rate > 0): the tick they
    /// wait for and their reply.
    waiting: Vec<(u64, ReplyTx)>,
    /// Notification descriptors of clients, mirrored on host pipes.
    bridges: Vec<NotifyBridge>,
    /// Host threads of the clients' simulated threads that asked for
    /// signals: (simulated tid, host pid, host tid).
    signal_threads: Vec<(u32, u32, u32)>,
    /// A descriptor for the reply being made.
    reply_fd: Option<OwnedFd>,
    /// The clock: host time when it started and the ticks it has run.
    clock_start: Instant,
    clock_ticks: u64,
    last_scan: Instant,
    /// The work the connection threads and the clock send.
    work: Receiver<Work>,
    /// The process whose exec, traced by hwt(4), may be paused in the
    /// hook now ([`Host::run_traced_program`]): not a job yet, but not
    /// gone either.
    exec_on: Option<u32>,
    /// A shutdown that came meanwhile, for the machine's loop.
    shutdown: Option<Sender<Outcome>>,
}

/// A handle on a running machine: what connection threads and the clock
/// send work through.
#[derive(Debug, Clone)]
pub struct Handle {
    work: Sender<Work>,
}

impl Handle {
    pub(crate) fn send(&self, w: Work) -> bool {
        self.work.send(w).is_ok()
    }

    /// Stops the machine and says what its checks found; None when it is
    /// gone already.
    pub fn shutdown(&self) -> Option<Outcome> {
        let (reply, answer) = channel();
        if !self.send(Work::Shutdown { reply }) {
            return None;
        }
        answer.recv().ok()
    }
}

/// Boots a machine as `cfg` describes, with hwpmc loaded, on a thread of
/// its own; the errno (FreeBSD's) of a failed module load, or a message.
pub fn boot(cfg: SimConfig) -> Result<Handle, String> {
    let (tx, rx) = channel::<Work>();
    let (ready_tx, ready_rx) = channel::<Result<(), String>>();
    std::thread::Builder::new()
        .name("ksimd-machine".into())
        .spawn(move || machine_thread(cfg, rx, ready_tx))
        .map_err(|e| format!("the machine's thread: {e}"))?;
    ready_rx
        .recv()
        .map_err(|_| "the machine's thread ended while booting".to_string())??;
    Ok(Handle { work: tx })
}

/// The largest pid the host hands out: the machine's own processes get
/// pids above it, so that every host pid is free for its process.
fn host_pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(99_999)
}

fn machine_thread(cfg: SimConfig, rx: Receiver<Work>, ready: Sender<Result<(), String>>) {
    // The log writer writes to clients' pipes and sockets from this
    // thread: a reader that went away is EPIPE, never a SIGPIPE that
    // kills the process hosting the machine.
    block_sigpipe();
    let host_max = host_pid_max();
    let machine_cfg = MachineConfig {
        cpus: vec![CpuState::Online; cfg.cpus as usize],
        cpuid: cfg.cpuid.clone(),
        first_pid: host_max + 1,
        pid_max: host_max.saturating_add(1_000_000),
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
            let _ = ready.send(Err(format!(
                "hwpmc did not load: FreeBSD errno {}",
                e.get()
            )));
            return;
        }
    };
    let sysnum = module.syscall_number();
    // hwt(4), and pt(4) where the CPU has Intel PT (ENXIO elsewhere).
    let trace = match m.in_thread(kld, hwt::Module::load) {
        Ok(hwt) => {
            let pt = m.in_thread(kld, || intel_pt::Module::load(&hwt)).ok();
            Some((pt, hwt))
        }
        Err(_) => None,
    };
    let mut sched = Scheduler {
        jobs: Vec::new(),
        cpus: cfg.cpus,
        next: 0,
        now: 0,
    };
    let mut what = format!("ksimd: simulated machine: {} CPUs", cfg.cpus);
    if let Some(w) = &cfg.workload {
        match w.start(&m) {
            Ok((pid, threads)) => {
                what += "; ";
                what += &w.describe(pid);
                sched.jobs.push(Job {
                    pid,
                    threads,
                    ends_at: None,
                    exited: false,
                });
            }
            Err(e) => {
                let _ = ready.send(Err(format!("workload: {e}")));
                return;
            }
        }
    }
    if let Some(dir) = &cfg.files_dir {
        // The programs a client may run (RunProgram) are there from the
        // start, for tools that read a command's image before it runs.
        for name in programs::NAMES.iter().chain([&programs::SECOND_OBJECT]) {
            if let Ok(image) = programs::image(ksim::cpu::Arch::X86_64, name) {
                let path = if *name == programs::SECOND_OBJECT {
                    programs::SECOND_OBJECT_PATH.to_string()
                } else {
                    format!("/usr/bin/{name}")
                };
                m.install(&path, image);
            }
        }
        if let Err(e) = m.export_files(dir) {
            let _ = ready.send(Err(format!("files into {}: {e}", dir.display())));
            return;
        }
    }
    if cfg.verbose {
        eprintln!("{what}");
    }
    let mut host = Host {
        m,
        module,
        trace,
        devs: BTreeMap::new(),
        scratch: BTreeMap::new(),
        sysnum,
        sched,
        cfg,
        clients: BTreeMap::new(),
        conns: BTreeMap::new(),
        leaving: std::collections::BTreeSet::new(),
        waiting: Vec::new(),
        bridges: Vec::new(),
        signal_threads: Vec::new(),
        reply_fd: None,
        clock_start: Instant::now(),
        clock_ticks: 0,
        last_scan: Instant::now(),
        work: rx,
        exec_on: None,
        shutdown: None,
    };
    // Requests are served one after another: a thread that sleeps in the
    // kernel outside a race could not be woken by a later one, so such a
    // sleep (a PCATCH one) ends as if by a signal rather than stopping
    // the daemon.
    host.m.set_unraced_sleeps_interrupted(true);
    let _ = ready.send(Ok(()));
    let shutdown = loop {
        let Ok(w) = host.work.recv() else { break None };
        host.handle(w);
        if let Some(reply) = host.shutdown.take() {
            break Some(reply);
        }
    };
    let outcome = host.stop();
    if let Some(reply) = shutdown {
        let _ = reply.send(outcome);
    }
}

/// `base` with the user and group ids (real, effective, saved) of `cred`.
fn with_ids(base: Cred, cred: PeerCred) -> Cred {
    Cred {
        uid: cred.uid,
        ruid: cred.uid,
        svuid: cred.uid,
        gid: cred.gid,
        rgid: cred.gid,
        svgid: cred.gid,
        ..base
    }
}

/// The pid an attach or detach request names (its `pm_pid`), if positive.
fn target_pid(arg: &[u8]) -> Option<u32> {
    let b = arg.get(PID_AT..PID_END)?;
    let pid = i32::from_ne_bytes(b.try_into().expect("4 bytes"));
    u32::try_from(pid).ok().filter(|&p| p > 0)
}

fn block_sigpipe() {
    let mut set = core::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: the set is initialised by sigemptyset before use; only this
    // thread's mask changes.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), core::ptr::null_mut());
    }
}

/// What the host says of process `pid`: its parent and start time, from
/// /proc (Linux); None when it is gone or a zombie.
#[cfg(target_os = "linux")]
fn host_process(pid: u32) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    let ppid = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((ppid, start))
}

/// The host's children of process `pid` (Linux: the children lists of
/// its threads in /proc).
#[cfg(target_os = "linux")]
fn host_children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children: Vec<u32> = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    children.sort_unstable();
    children.dedup();
    children
}

#[cfg(not(target_os = "linux"))]
fn host_children(_: u32) -> Vec<u32> {
    Vec::new()
}

#[cfg(not(target_os = "linux"))]
fn host_process(pid: u32) -> Option<(u32, u64)> {
    // SAFETY: kill with signal 0 only checks that the process exists.
    (unsafe { libc::kill(pid as libc::pid_t, 0) } == 0 || pid == 0).then_some((0, 0))
}

impl Host {
    /// One piece of work from a connection thread or the clock.
    fn handle(&mut self, w: Work) {
        match w {
            Work::Request {
                conn,
                cred,
                req,
                fd,
                reply,
            } => {
                self.m.retry_host_writers();
                let r = self.serve(conn, cred, req, fd, &reply);
                let pass = self.reply_fd.take();
                if let Some(r) = r {
                    let _ = reply.send((r, pass));
                }
                self.pump_notifications();
            }
            Work::Disconnect { conn } => self.disconnect(conn),
            Work::Clock => {
                self.clock();
                self.pump_notifications();
            }
            Work::Shutdown { reply } => self.shutdown = Some(reply),
        }
        self.scan_hosts();
    }

    fn status(&self) -> Status {
        Status {
            clients: self.conns.len() as u32,
            processes: self.m.processes().len() as u32,
            ticks: self.sched.now,
            violations: self.m.violations().len() as u32,
            kmem_live: self.m.kmem_live().0 as u64,
        }
    }

    /// Serves one request; None when the reply comes later (an Advance
    /// that waits for the clock).
    fn serve(
        &mut self,
        conn: ConnId,
        cred: PeerCred,
        req: Request,
        fd: Option<OwnedFd>,
        reply: &ReplyTx,
    ) -> Option<Reply> {
        let pid = match (&req, self.conns.get(&conn)) {
            (Request::Hello { .. }, Some(_)) => return Some(Reply::Error(errno::EPROTO)),
            (Request::Hello { .. }, None) => 0,
            (Request::Status, _) => return Some(Reply::Status(self.status())),
            (_, Some(&pid)) => pid,
            // Anything before hello is a protocol error.
            (_, None) => return Some(Reply::Error(errno::EPROTO)),
        };
        if pid != 0 {
            self.update_cred(pid, cred);
        }
        Some(match req {
            Request::Hello {
                parent,
                ticks_per_call,
                comm,
                path,
                image,
            } => self.hello(conn, cred, parent, ticks_per_call, &comm, &path, image),
            Request::Call { op, arg, with_fd } => self.call(pid, op, arg, with_fd, fd),
            Request::Sysctl { name } => match self.m.sysctl_str(&name) {
                Some(s) => Reply::Text(s),
                None => Reply::Error(2), // ENOENT
            },
            Request::Advance { ticks } => {
                if self.cfg.rate > 0.0 {
                    self.waiting
                        .push((self.sched.now + u64::from(ticks), reply.clone()));
                    return None;
                }
                let tid = self.clients[&pid].tid;
                self.pass(Some(tid), u64::from(ticks));
                Reply::Done
            }
            Request::ForkHeld => {
                let (child, _) = self.m.fork(pid);
                Reply::Pid(child)
            }
            Request::RunWork {
                pid: job,
                threads,
                ticks,
            } => {
                if !self.is_child(pid, job) || !(1..=64).contains(&threads) {
                    return Some(Reply::Error(errno::EINVAL));
                }
                let tids = run_work(&self.m, job, threads);
                self.sched.jobs.push(Job {
                    pid: job,
                    threads: tids,
                    ends_at: Some(self.sched.now + ticks),
                    exited: false,
                });
                Reply::Done
            }
            Request::JobExited { pid: job } => {
                match self.sched.jobs.iter().find(|j| j.pid == job) {
                    Some(j) => Reply::Flag(j.exited),
                    // In its exec still, paused by hwt(4).
                    None if self.exec_on == Some(job) => Reply::Flag(false),
                    None => Reply::Error(errno::ESRCH),
                }
            }
            Request::Kill { pid: job, held } => self.kill(pid, job, held),
            Request::Processes => Reply::Processes(self.m.processes()),
            Request::ProcMaps { pid: target } => self.proc_maps(pid, target),
            Request::DevOpen { path, write } => self.dev_open(pid, &path, write),
            Request::DevIoctl {
                handle,
                cmd,
                arg,
                regions,
            } => self.dev_ioctl(pid, handle, cmd, arg, regions),
            Request::DevMmap {
                handle,
                offset,
                size,
                prot,
            } => self.dev_mmap(pid, handle, offset, size, prot),
            Request::RunProgram {
                pid: job,
                name,
                args,
            } => return self.run_program(pid, job, &name, &args, reply),
            Request::Bye => {
                self.leaving.insert(conn);
                Reply::Done
            }
            Request::Status => unreachable!("answered above"),
        })
    }

    /// open(2) of a device by client `pid`.
    fn dev_open(&mut self, pid: u32, path: &str, write: bool) -> Reply {
        let tid = self.clients[&pid].tid;
        match self.m.dev_open(tid, path, true, write) {
            Ok(fd) => {
                let handle = self.devs.keys().next_back().map_or(1, |h| h + 1);
                self.devs.insert(handle, (pid, fd));
                Reply::Pid(handle)
            }
            Err(e) => Reply::Error(e),
        }
    }

    /// The descriptor `handle` of client `pid`.
    fn dev_fd(&self, pid: u32, handle: u32) -> Option<ksim::DevFd> {
        self.devs
            .get(&handle)
            .filter(|(owner, _)| *owner == pid)
            .map(|(_, fd)| fd.clone())
    }

    /// ioctl(2) by client `pid`: the argument block and the memory its
    /// pointer fields name go to the process's memory, the pointers are
    /// made to point there, and what the call left comes back.
    fn dev_ioctl(
        &mut self,
        pid: u32,
        handle: u32,
        cmd: u32,
        mut arg: Vec<u8>,
        regions: Vec<(u32, Vec<u8>)>,
    ) -> Reply {
        let Some(fd) = self.dev_fd(pid, handle) else {
            return Reply::Error(errno::EBADF);
        };
        let tid = self.clients[&pid].tid;
        let mut places = Vec::with_capacity(regions.len() + 1);
        for (i, (at, bytes)) in regions.iter().enumerate() {
            let at = *at as usize;
            if at + 8 > arg.len() {
                return Reply::Error(errno::EINVAL);
            }
            let addr = self.scratch_slot(pid, i + 1, bytes.len());
            self.m.user_write(pid, addr, bytes);
            arg[at..at + 8].copy_from_slice(&addr.to_ne_bytes());
            places.push((addr, bytes.len()));
        }
        let arg_addr = self.scratch_slot(pid, 0, arg.len());
        self.m.user_write(pid, arg_addr, &arg);
        let r = self.m.dev_ioctl(tid, &fd, cmd, arg_addr);
        let arg = self.m.user_read(pid, arg_addr, arg.len());
        let regions = places
            .iter()
            .map(|&(addr, len)| self.m.user_read(pid, addr, len))
            .collect();
        Reply::Ioctled {
            errno: r.err().unwrap_or(0),
            arg,
            regions,
        }
    }

    /// User memory of client `pid` for the `slot`th block of an ioctl, of
    /// at least `len` bytes, reused from call to call.
    fn scratch_slot(&mut self, pid: u32, slot: usize, len: usize) -> u64 {
        let slots = self.scratch.entry(pid).or_default();
        while slots.len() <= slot {
            slots.push((0, 0));
        }
        if slots[slot].1 < len.max(1) {
            let size = len.max(64).next_power_of_two();
            slots[slot] = (self.m.user_alloc(pid, size), size);
        }
        slots[slot].0
    }

    /// mmap(2) of a device by client `pid`: the object's memory goes back
    /// as a descriptor to map.
    fn dev_mmap(&mut self, pid: u32, handle: u32, offset: u64, size: u64, prot: i32) -> Reply {
        let Some(fd) = self.dev_fd(pid, handle) else {
            return Reply::Error(errno::EBADF);
        };
        let tid = self.clients[&pid].tid;
        match self.m.dev_mmap(tid, &fd, offset, size, prot) {
            Ok(obj) => match obj.fd() {
                Some(memfd) => {
                    self.reply_fd = Some(memfd);
                    Reply::Done
                }
                None => Reply::Error(errno::ENODEV),
            },
            Err(e) => Reply::Error(e),
        }
    }

    /// RunProgram: held child `job` of client `pid` execs program `name`
    /// and goes to the scheduler until it exits. None when the reply went
    /// already (a traced command, [`Host::run_traced_program`]).
    fn run_program(
        &mut self,
        pid: u32,
        job: u32,
        name: &str,
        args: &[String],
        reply: &ReplyTx,
    ) -> Option<Reply> {
        if !self.is_child(pid, job) {
            return Some(Reply::Error(errno::EINVAL));
        }
        let arch = ksim::cpu::Arch::X86_64;
        let Ok(image) = programs::image(arch, name) else {
            return Some(Reply::Error(errno::ENOENT));
        };
        if name == "mapobj" {
            if let Ok(object) = programs::image(arch, programs::SECOND_OBJECT) {
                self.m.install(programs::SECOND_OBJECT_PATH, object);
            }
        }
        let mut argv = vec![name];
        argv.extend(args.iter().map(String::as_str));
        let path = format!("/usr/bin/{name}");
        if self.m.proc_flag2(job) & ksim::P2_HWT != 0 {
            if self.exec_on.is_some() {
                return Some(Reply::Error(errno::EBUSY));
            }
            // The tracer goes on at once: the exec may pause in hwt(4)'s
            // hook until the tracer's WAKEUP, a request still to come.
            let _ = reply.send((Reply::Done, None));
            if self.run_traced_program(job, &path, &image, &argv) {
                self.add_job(job);
            } else {
                self.m.exit(job);
            }
            return None;
        }
        if self.m.exec_program(job, &path, &image, &argv).is_err() {
            return Some(Reply::Error(errno::ENOEXEC));
        }
        self.add_job(job);
        Some(Reply::Done)
    }

    /// The program `job` execs runs from now on, as the scheduler's job.
    fn add_job(&mut self, job: u32) {
        let threads = self.m.proc_info(job).map(|p| p.threads).unwrap_or_default();
        self.sched.jobs.push(Job {
            pid: job,
            threads,
            ends_at: None,
            exited: false,
        });
    }

    /// The exec of a command that hwt(4) traces, which pauses in the
    /// exec hook when the tracer asked for it (pause-on-mmap) until its
    /// WAKEUP: the exec is a piece of a race with this loop, which serves
    /// the requests that come meanwhile (the tracer's records, its new
    /// configuration, START, WAKEUP) until the exec is done; a signal to
    /// the process (a shutdown) ends the pause. Whether the exec worked.
    fn run_traced_program(&mut self, job: u32, path: &str, image: &[u8], argv: &[&str]) -> bool {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (done, worked) = (AtomicBool::new(false), AtomicBool::new(false));
        // The machine apart from `self`, which the loop below borrows.
        let m = self.m.clone();
        let exec = || {
            worked.store(
                m.exec_program(job, path, image, argv).is_ok(),
                Ordering::Release,
            );
            done.store(true, Ordering::Release);
        };
        self.exec_on = Some(job);
        m.race_here(u64::from(job), vec![Box::new(exec)], || {
            loop {
                ksim::sched::run_others();
                if done.load(Ordering::Acquire) {
                    break;
                }
                let Ok(w) = self.work.recv() else {
                    // Nobody is left to wake it.
                    ksim::sched::signal(job);
                    ksim::sched::run_others();
                    break;
                };
                let stop = matches!(w, Work::Shutdown { .. });
                self.handle(w);
                if stop {
                    ksim::sched::signal(job);
                }
            }
        });
        self.exec_on = None;
        worked.load(Ordering::Acquire)
    }

    /// The executable objects `target` mapped, for a caller that may
    /// see them (`kern.proc.vmmap`'s p_candebug, simplified): the
    /// super-user, or a process of the same real and effective user as
    /// the target; ESRCH for no such process, EPERM otherwise.
    fn proc_maps(&self, caller: u32, target: u32) -> Reply {
        let (Some(me), Some(it)) = (self.m.proc_info(caller), self.m.proc_info(target)) else {
            return Reply::Error(errno::ESRCH);
        };
        if it.zombie {
            return Reply::Error(errno::ESRCH);
        }
        let same_user = me.cred.uid == it.cred.uid && me.cred.uid == it.cred.ruid;
        if me.cred.uid != 0 && !same_user {
            return Reply::Error(errno::EPERM);
        }
        Reply::Maps(
            self.m
                .mappings(target)
                .into_iter()
                .map(|m| (m.start, m.end, m.path))
                .collect(),
        )
    }

    /// Whether `child` is a live child of `parent` that is not a client.
    fn is_child(&self, parent: u32, child: u32) -> bool {
        !self.clients.contains_key(&child)
            && self
                .m
                .proc_info(child)
                .is_some_and(|p| p.ppid == parent && !p.zombie)
    }

    fn kill(&mut self, by: u32, pid: u32, held: bool) -> Reply {
        if !self.is_child(by, pid) {
            return Reply::Error(errno::ESRCH);
        }
        match self.sched.jobs.iter_mut().find(|j| j.pid == pid) {
            Some(j) if !j.exited => {
                j.exited = true;
                self.m.exit(pid);
                Reply::Done
            }
            None if held => {
                self.m.exit(pid);
                Reply::Done
            }
            _ => Reply::Error(errno::ESRCH),
        }
    }

    /// A host process changed its ids (setuid(2)): so does its mirror.
    fn update_cred(&mut self, pid: u32, cred: PeerCred) {
        let Some(info) = self.m.proc_info(pid) else {
            return;
        };
        if info.cred.uid != cred.uid || info.cred.gid != cred.gid {
            self.m.set_cred(pid, with_ids(info.cred, cred));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn hello(
        &mut self,
        conn: ConnId,
        cred: PeerCred,
        parent: u32,
        ticks_per_call: u32,
        comm: &str,
        path: &str,
        image: u64,
    ) -> Reply {
        let host_pid = cred.pid;
        let existing = self
            .clients
            .iter()
            .find(|(_, c)| host_pid != 0 && c.host_pid == host_pid)
            .map(|(&p, _)| p);
        let existing = existing.or_else(|| self.mirror_child(host_pid, parent));
        let pid = match existing {
            Some(pid) => {
                // A process the machine has: another connection of the
                // same image, or a new image after an exec(2), which the
                // machine's process does now (its exec hooks run).
                let c = self.clients.get_mut(&pid).expect("a client");
                let execed = image != 0 && c.image != 0 && c.image != image;
                if image != 0 {
                    c.image = image;
                }
                if execed && !path.is_empty() {
                    self.m.exec(pid, path, None);
                }
                pid
            }
            None => {
                let c = with_ids(Cred::root(), cred);
                let want = (host_pid != 0).then_some(host_pid);
                let (pid, _) = self.m.spawn_as(want, c, comm);
                if let Err(e) = self.register(pid, host_pid) {
                    self.end(pid);
                    return Reply::Error(e);
                }
                self.clients.get_mut(&pid).expect("registered").image = image;
                pid
            }
        };
        self.update_cred(pid, cred);
        let client = self.clients.get_mut(&pid).expect("registered");
        client.conns += 1;
        client.ticks_per_call = ticks_per_call;
        self.conns.insert(conn, pid);
        Reply::Welcome {
            pid,
            hz: MachineConfig::default().hz,
        }
    }

    /// Mirrors host process `host_pid`, a child of client `parent`
    /// (whose host pid the host confirms), as the simulated child of that
    /// client: fork(2) on the machine, under the child's own pid; the
    /// child is a client.
    fn mirror_child(&mut self, host_pid: u32, parent: u32) -> Option<u32> {
        if host_pid == 0 || parent == 0 {
            return None;
        }
        let (ppid, _) = host_process(host_pid)?;
        let parent = if cfg!(target_os = "linux") {
            ppid
        } else {
            parent
        };
        let (&parent_pid, _) = self.clients.iter().find(|(_, c)| c.host_pid == parent)?;
        let image = self.clients[&parent_pid].image;
        let (pid, _) = self.m.fork_as(parent_pid, Some(host_pid));
        if self.register(pid, host_pid).is_err() {
            self.end(pid);
            return None;
        }
        // The child runs its parent's image until it execs.
        self.clients.get_mut(&pid).expect("registered").image = image;
        Some(pid)
    }

    /// Makes `pid` a client: its thread gets a `struct uexterror`
    /// registered, as FreeBSD's libc registers one for each thread.
    fn register(&mut self, pid: u32, host_pid: u32) -> Result<(), i32> {
        let tid = self.m.proc_info(pid).ok_or(errno::ESRCH)?.threads[0];
        let uexterror = self.m.user_alloc(pid, size_of::<Uexterror>());
        let registration = Uexterror {
            ver: UEXTERROR_VER,
            ..Uexterror::default()
        };
        self.m.user_write(pid, uexterror, registration.as_bytes());
        // A forked child has its parent's registration (at an address of
        // the parent's): it replaces it, as libc does in a new image.
        self.m
            .exterrctl(tid, EXTERRCTL_ENABLE, EXTERRCTLF_FORCE, uexterror)?;
        self.clients.insert(
            pid,
            Client {
                host_pid,
                tid,
                uexterror,
                conns: 0,
                ticks_per_call: 0,
                start_time: host_process(host_pid).map(|(_, t)| t),
                image: 0,
            },
        );
        Ok(())
    }

    /// The target of an attach or detach is a client whose host process
    /// is gone (its parent may have reaped it before its connection's end
    /// reached the machine): it ends first, as it has on the host.
    fn reap_if_gone(&mut self, target: u32) {
        if self.clients.get(&target).is_some_and(Client::host_gone) {
            self.end(target);
        }
    }

    /// A PMC attached to (or detached from) a host child of a client that
    /// has not connected yet: the child is mirrored first, so that it is
    /// there, as it is on FreeBSD the moment fork(2) returns.
    fn adopt_target(&mut self, target: u32) {
        if self.m.proc_info(target).is_some() {
            return;
        }
        let Some((ppid, _)) = host_process(target) else {
            return;
        };
        let parent = self
            .clients
            .iter()
            .find(|(_, c)| c.host_pid == ppid && c.host_pid != 0)
            .map(|(&p, c)| (p, c.host_pid));
        if let Some((_, parent_host)) = parent {
            self.mirror_child(target, parent_host);
        }
    }

    fn call(
        &mut self,
        pid: u32,
        op: u32,
        mut arg: Vec<u8>,
        with_fd: bool,
        fd: Option<OwnedFd>,
    ) -> Reply {
        let (tid, uexterror, ticks) = {
            let c = &self.clients[&pid];
            (c.tid, c.uexterror, c.ticks_per_call)
        };
        // The host thread asking for signals rides in PMC_OP_EXT_NOTIFY's
        // last spare word, which the kernel must see as zero.
        let mut host_tid = 0;
        if op == PMC_OP_EXT_NOTIFY && arg.len() == size_of::<PmcOpNotify>() {
            let at = core::mem::offset_of!(PmcOpNotify, pm_spare) + 4;
            host_tid = u32::from_ne_bytes(arg[at..at + 4].try_into().expect("4 bytes"));
            arg[at..at + 4].fill(0);
        }
        if ticks > 0 {
            self.pass(Some(tid), u64::from(ticks));
        }
        if op == PmcOp::Pmcattach.raw() || op == PmcOp::Pmcdetach.raw() {
            if let Some(target) = target_pid(&arg) {
                self.reap_if_gone(target);
                self.adopt_target(target);
            }
        }
        // A log descriptor is the client's own: the simulated process gets
        // a file that writes to it.
        let configure = (op == PmcOp::Configurelog.raw() && arg.len() >= LOGFD_END)
            .then(|| i32::from_ne_bytes(arg[LOGFD_AT..LOGFD_END].try_into().expect("4 bytes")));
        let standin = match (configure, fd) {
            (Some(host_fd), Some(fd)) if host_fd >= 0 && with_fd => {
                // SAFETY: fcntl(F_GETFL) only reads the status flags of a
                // descriptor this thread owns.
                let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
                let writable = flags >= 0 && flags & libc::O_ACCMODE != libc::O_RDONLY;
                let sim_fd = self.m.open(
                    pid,
                    FileKind::Host {
                        fd: fd.into_raw_fd(),
                    },
                    writable,
                );
                Some((host_fd, sim_fd))
            }
            // A descriptor the client does not have open: nor does its
            // simulated process.
            (Some(host_fd), _) if host_fd >= 0 => Some((host_fd, NO_SUCH_FD)),
            (_, Some(_)) => return Reply::Error(errno::EBADF),
            _ => None,
        };
        if let Some((_, sim_fd)) = standin {
            arg[LOGFD_AT..LOGFD_END].copy_from_slice(&sim_fd.to_ne_bytes());
        }
        let uaddr = if arg.is_empty() {
            0
        } else {
            let a = self.m.user_alloc(pid, arg.len());
            self.m.user_write(pid, a, &arg);
            a
        };
        let r = self.m.syscall(tid, self.sysnum, &[u64::from(op), uaddr]);
        if !arg.is_empty() {
            arg = self.m.user_read(pid, uaddr, arg.len());
        }
        if op == PMC_OP_EXT_NOTIFY && r.is_ok() {
            if let Err(e) = self.bridge_notify(pid, tid, host_tid, &mut arg) {
                return Reply::Error(e);
            }
        }
        if let Some((host_fd, sim_fd)) = standin {
            arg[LOGFD_AT..LOGFD_END].copy_from_slice(&host_fd.to_ne_bytes());
            // The kernel keeps its reference, as after the owner's close(2)
            // of its descriptor.
            if sim_fd != NO_SUCH_FD {
                self.m.close(pid, sim_fd);
            }
        }
        let exterr = if r.is_err() {
            self.m.user_read(pid, uexterror, size_of::<Uexterror>())
        } else {
            Vec::new()
        };
        debug_assert!(exterr.is_empty() || Uexterror::read_from(&exterr).is_some());
        Reply::Called {
            errno: r.err().unwrap_or(0),
            arg,
            exterr,
        }
    }

    /// After a successful PMC_OP_EXT_NOTIFY of `pid`'s thread `tid`: the
    /// descriptor the kernel made goes to the client as the read end of a
    /// host pipe (the reply carries it), whose number replaces the
    /// simulated one in `pm_fd`; signals for `tid` go to host thread
    /// `host_tid` of the client. A FreeBSD errno when the host has no pipe.
    fn bridge_notify(
        &mut self,
        pid: u32,
        tid: u32,
        host_tid: u32,
        arg: &mut [u8],
    ) -> Result<(), i32> {
        let Some(mut req) = PmcOpNotify::read_from(arg) else {
            return Ok(());
        };
        let Some(file) = self.m.file_of(pid, req.pm_fd) else {
            return Ok(());
        };
        // The kernel's reference keeps the file; the client's descriptor
        // is the pipe.
        self.m.close(pid, req.pm_fd);
        let mut ends = [0; 2];
        // SAFETY: pipe2 writes two descriptors into `ends`.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(errno::EMFILE);
        }
        // SAFETY: pipe2 made both descriptors, owned from here on.
        let (read, write) = unsafe {
            use std::os::fd::FromRawFd;
            (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1]))
        };
        // SAFETY: fcntl on a descriptor owned here.
        unsafe {
            let fl = libc::fcntl(write.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(write.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        // The client's number for it is the one SCM_RIGHTS gives it.
        req.pm_fd = -1;
        arg.copy_from_slice(req.as_bytes());
        self.reply_fd = Some(read);
        self.bridges.push(NotifyBridge {
            file,
            pipe: write,
            unsent: None,
            ended: false,
        });
        let host_pid = self.clients.get(&pid).map_or(0, |c| c.host_pid);
        if req.pm_signo != 0 && host_pid != 0 && host_tid != 0 {
            self.signal_threads.retain(|&(t, _, _)| t != tid);
            self.signal_threads.push((tid, host_pid, host_tid));
        }
        Ok(())
    }

    /// Moves what the machine's notification files took to the clients'
    /// pipes, and the signals its kernel sent the clients' threads to
    /// their host threads.
    fn pump_notifications(&mut self) {
        for b in &mut self.bridges {
            loop {
                if b.unsent.is_none() && !b.ended {
                    match self.m.notify_read_file(b.file) {
                        Some(NotifyRead::Record(r)) => b.unsent = Some(r),
                        Some(NotifyRead::Empty) => break,
                        Some(NotifyRead::End) | None => b.ended = true,
                    }
                }
                let Some(r) = b.unsent.take() else {
                    break;
                };
                // SAFETY: write(2) of a buffer to a descriptor owned here.
                let n = unsafe { libc::write(b.pipe.as_raw_fd(), r.as_ptr().cast(), r.len()) };
                if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
                    // The reader is behind: the newest record replaces
                    // this one when it comes (they are cumulative).
                    if let Some(NotifyRead::Record(newer)) = self.m.notify_read_file(b.file) {
                        b.unsent = Some(newer);
                    } else {
                        b.unsent = Some(r);
                    }
                    break;
                }
                if n < 0 {
                    // The reader closed its end: nothing more to send.
                    b.ended = true;
                    break;
                }
            }
        }
        self.bridges.retain(|b| !(b.ended && b.unsent.is_none()));
        for sig in self.m.take_thread_signals() {
            let Some(host_pid) = self.clients.get(&sig.pid).map(|c| c.host_pid) else {
                continue;
            };
            if host_pid == 0 {
                continue;
            }
            let host_tid = self
                .signal_threads
                .iter()
                .find(|&&(t, p, _)| t == sig.tid && p == host_pid)
                .map_or(host_pid, |&(_, _, h)| h);
            let Some(host_sig) = crate::proto::host_signal(sig.sig) else {
                continue;
            };
            queue_host_signal(host_pid, host_tid, host_sig, sig.value);
        }
    }

    /// Lets `ticks` ticks pass: the jobs run if any can, else `caller`'s
    /// thread on CPU 0, else the CPUs idle.
    fn pass(&mut self, caller: Option<u32>, ticks: u64) {
        if self.sched.runnable(&self.m).is_empty() {
            match caller {
                Some(tid) => {
                    let mut left = ticks;
                    while left > 0 {
                        let n = left.min(u64::from(u32::MAX)) as u32;
                        self.m.run(tid, 0, n);
                        left -= u64::from(n);
                    }
                }
                None => {
                    for _ in 0..ticks {
                        self.m.tick_all();
                    }
                }
            }
            self.sched.now += ticks;
        } else {
            self.sched.run(&self.m, ticks);
        }
        self.m.retry_host_writers();
    }

    /// The clock's share of ticks since it started (rate > 0), and the
    /// Advance requests that are due.
    fn clock(&mut self) {
        // A log writer waiting for a host pipe or socket's reader to make
        // room tries again, whether or not time passes.
        self.m.retry_host_writers();
        if self.cfg.rate <= 0.0 {
            return;
        }
        let hz = MachineConfig::default().hz as f64;
        let due = (self.clock_start.elapsed().as_secs_f64() * hz * self.cfg.rate) as u64;
        // Never more than a second's worth at once: a machine that cannot
        // keep up falls behind rather than stalling its clients.
        let ticks = due.saturating_sub(self.clock_ticks).min(hz as u64);
        self.clock_ticks = due;
        if ticks > 0 {
            self.pass(None, ticks);
        }
        let now = self.sched.now;
        self.waiting.retain(|(at, reply)| {
            if *at <= now {
                let _ = reply.send((Reply::Done, None));
                false
            } else {
                true
            }
        });
    }

    /// A connection closed: when it was its process's last, the process
    /// ends if it said goodbye or the host says it is gone (it died, or
    /// was killed); a live process whose connection an exec(2) closed
    /// stays until it reconnects or is gone.
    fn disconnect(&mut self, conn: ConnId) {
        let Some(pid) = self.conns.remove(&conn) else {
            return;
        };
        let said_bye = self.leaving.remove(&conn);
        let Some(c) = self.clients.get_mut(&pid) else {
            return;
        };
        c.conns -= 1;
        if c.conns > 0 {
            return;
        }
        // A client whose host pid is unknown cannot be looked for later.
        if said_bye || c.host_pid == 0 || c.host_gone() {
            self.end(pid);
        }
    }

    /// A client's process ends: its exit hooks run (its PMCs and log go),
    /// and it is reaped.
    fn end(&mut self, pid: u32) {
        self.clients.remove(&pid);
        let conns = &mut self.conns;
        self.leaving.retain(|c| conns.get(c) != Some(&pid));
        conns.retain(|_, p| *p != pid);
        if self.m.proc_info(pid).is_some_and(|p| !p.zombie) {
            self.m.exit(pid);
        }
        if self.m.proc_info(pid).is_some_and(|p| p.zombie) {
            self.m.reap(pid);
        }
    }

    /// Clients the host says are gone (killed before they could close a
    /// connection they passed on, or mirrored and never connected) end.
    fn scan_hosts(&mut self) {
        if self.last_scan.elapsed() < Duration::from_millis(100) {
            return;
        }
        self.last_scan = Instant::now();
        let gone: Vec<u32> = self
            .clients
            .iter()
            .filter(|(_, c)| c.host_gone())
            .map(|(&p, _)| p)
            .collect();
        for pid in gone {
            self.end(pid);
        }
        // Children of processes that PMCs follow, which have made no
        // request: mirrored as their fork, so that PMC_F_DESCENDANTS
        // follows them as on FreeBSD (a child that lives less than a scan
        // is missed).
        let followed: Vec<u32> = self
            .clients
            .iter()
            .filter(|&(&pid, c)| {
                c.host_pid != 0
                    && self
                        .m
                        .proc_info(pid)
                        .is_some_and(|p| p.flags & ksim::P_HWPMC != 0)
            })
            .map(|(_, c)| c.host_pid)
            .collect();
        for parent in followed {
            for child in host_children(parent) {
                let known = self.m.proc_info(child).is_some()
                    || self.clients.values().any(|c| c.host_pid == child);
                if !known {
                    self.mirror_child(child, parent);
                }
            }
        }
    }

    fn stop(mut self) -> Outcome {
        let pids: Vec<u32> = self.clients.keys().copied().collect();
        for pid in pids {
            self.end(pid);
        }
        for w in std::mem::take(&mut self.waiting) {
            let _ = w.1.send((Reply::Error(6), None)); // ENXIO: the machine is going
        }
        let (_, unload) = self.m.spawn(Cred::root(), "kldunload");
        let module = self.module;
        let trace = self.trace.take();
        self.devs.clear();
        self.m.in_thread(unload, || {
            // pt before hwt, hwt before hwpmc: the order of their
            // dependencies.
            if let Some((pt, hwt)) = trace {
                drop(pt);
                drop(hwt);
            }
            module.unload()
        });
        Outcome {
            violations: self
                .m
                .violations()
                .iter()
                .map(|v| format!("{v:?}"))
                .collect(),
            leaked: self.m.kmem_live(),
        }
    }
}

/// Serves connection `conn` on socket `s` until it closes: each packet is
/// a request for the machine, whose reply goes back on the socket. A
/// packet that is not a request gets an error reply (EPROTO) and the
/// connection stays; a frame longer than the protocol allows ends it.
pub fn serve_connection(handle: &Handle, conn: ConnId, s: OwnedFd) {
    let peer = sock::peer_cred(&s).unwrap_or(PeerCred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    });
    loop {
        let packet = match sock::recv(s.as_raw_fd()) {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => {
                // A stream out of step cannot be read on: say why, and end.
                if e.kind() == std::io::ErrorKind::InvalidData {
                    let _ = sock::send(s.as_raw_fd(), &Reply::Error(errno::EPROTO).encode(), None);
                }
                break;
            }
        };
        // Credentials the kernel could not vouch for (pid 0) are not used.
        let cred = packet.cred.filter(|c| c.pid != 0).unwrap_or(peer);
        let reply = match Request::decode(&packet.bytes) {
            Err(_) => Reply::Error(errno::EPROTO),
            Ok(req) => {
                let with_fd = matches!(req, Request::Call { with_fd: true, .. });
                let mut fds = packet.fds.into_iter();
                let fd = if with_fd { fds.next() } else { None };
                if fds.next().is_some() {
                    // Descriptors the request did not announce.
                    Reply::Error(errno::EBADF)
                } else {
                    let (tx, rx) = channel();
                    if !handle.send(Work::Request {
                        conn,
                        cred,
                        req,
                        fd,
                        reply: tx,
                    }) {
                        break;
                    }
                    match rx.recv() {
                        Ok((r, pass)) => {
                            if sock::send(
                                s.as_raw_fd(),
                                &r.encode(),
                                pass.as_ref().map(|f| f.as_raw_fd()),
                            )
                            .is_err()
                            {
                                break;
                            }
                            continue;
                        }
                        Err(_) => break,
                    }
                }
            }
        };
        if sock::send(s.as_raw_fd(), &reply.encode(), None).is_err() {
            break;
        }
    }
    handle.send(Work::Disconnect { conn });
}

/// Who may use a socket that serves anyone who can reach it (the
/// private machine's abstract socket has no file permissions): the
/// machine's own user, root, and processes whose parent is a client.
fn may_connect(s: &OwnedFd, me: u32) -> bool {
    let Ok(peer) = sock::peer_cred(s) else {
        return false;
    };
    if peer.uid == me || peer.uid == 0 {
        return true;
    }
    // A child of this process that changed its ids after it forked.
    let parent = host_process(peer.pid).map(|(p, _)| p);
    // SAFETY: getpid(2) has no preconditions.
    let own = unsafe { libc::getpid() } as u32;
    parent == Some(own) || peer.pid == own
}

/// Accepts connections on `listener` for ever (until accept fails), each
/// served on a thread of its own. `check_peer`: refuse peers that
/// [`may_connect`] refuses.
pub fn accept_loop(handle: Handle, listener: OwnedFd, check_peer: bool) {
    // SAFETY: getuid(2) has no preconditions.
    let me = unsafe { libc::getuid() };
    let mut next: ConnId = 1;
    while let Ok(s) = sock::accept(&listener) {
        if check_peer && !may_connect(&s, me) {
            let _ = sock::send(s.as_raw_fd(), &Reply::Error(errno::EPERM).encode(), None);
            continue;
        }
        let conn = next;
        next += 1;
        let h = handle.clone();
        if std::thread::Builder::new()
            .name(format!("ksimd-conn-{conn}"))
            .spawn(move || serve_connection(&h, conn, s))
            .is_err()
        {
            // Out of threads: the connection is dropped (closed).
            continue;
        }
    }
}

/// How often the clock wakes the machine: every 10 ms, to run the ticks
/// that are due when simulated time follows the host's, to let log
/// writers waiting for a host reader try again, and to look for clients
/// that are gone (at most every 100 ms).
pub fn clock_period(_rate: f64) -> Duration {
    Duration::from_millis(10)
}

/// Starts the clock: every `period` of host time the machine runs the
/// ticks that are due (at the machine's rate) and looks for clients the
/// host says are gone.
pub fn start_clock(handle: Handle, period: Duration) {
    let _ = std::thread::Builder::new()
        .name("ksimd-clock".into())
        .spawn(move || {
            while handle.send(Work::Clock) {
                std::thread::sleep(period);
            }
        });
}

/// A machine private to this process, served on an abstract socket
/// (Linux) that the process's forked children reach too; returns its
/// socket's name. The machine lives as long as the process.
pub fn start_private(cfg: SimConfig) -> Result<String, String> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: getpid(2) has no preconditions.
    let pid = unsafe { libc::getpid() };
    // A name nobody can guess and take first.
    let mut nonce = [0u8; 16];
    // SAFETY: getrandom fills at most the 16 bytes of `nonce`.
    let got = unsafe { libc::getrandom(nonce.as_mut_ptr().cast(), nonce.len(), 0) };
    if got != nonce.len() as isize {
        return Err(format!(
            "getrandom for the private socket's name: {}",
            std::io::Error::last_os_error()
        ));
    }
    let nonce = u128::from_ne_bytes(nonce);
    let name = if cfg!(target_os = "linux") {
        format!("@ksimd-private-{pid}-{n}-{nonce:x}")
    } else {
        let dir = std::env::temp_dir().join(format!("ksimd-private-{pid}-{n}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        dir.join("sock").to_string_lossy().into_owned()
    };
    let rate = cfg.rate;
    let handle = boot(cfg)?;
    let listener = sock::listen(&name, 0o600).map_err(|e| format!("socket {name}: {e}"))?;
    start_clock(handle.clone(), clock_period(rate));
    std::thread::Builder::new()
        .name("ksimd-accept".into())
        .spawn(move || accept_loop(handle, listener, true))
        .map_err(|e| format!("the accepting thread: {e}"))?;
    Ok(name)
}

/// The errno a client reports for a daemon it cannot use.
pub fn unreachable_errno(e: &std::io::Error) -> c_int {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => libc::EPERM,
        _ => libc::ENXIO,
    }
}

/// rt_tgsigqueueinfo(2): `sig` to host thread `tid` of `pid`, with
/// SI_QUEUE and `value` in si_value, as the simulated kernel sent it.
fn queue_host_signal(pid: u32, tid: u32, sig: i32, value: i32) {
    // SAFETY: an all-zero siginfo_t is valid; the fields Linux reads for
    // SI_QUEUE are set below through the libc layout.
    let mut info: libc::siginfo_t = unsafe { core::mem::zeroed() };
    info.si_signo = sig;
    info.si_code = libc::SI_QUEUE;
    // SAFETY: Linux's siginfo_t for SI_QUEUE: si_pid and si_uid at 16 and
    // 20 (in the union after the three ints and padding), si_value at 24.
    unsafe {
        let base = (&mut info as *mut libc::siginfo_t).cast::<u8>();
        base.add(16)
            .cast::<i32>()
            .write_unaligned(std::process::id() as i32);
        base.add(20).cast::<u32>().write_unaligned(libc::getuid());
        base.add(24).cast::<i32>().write_unaligned(value);
    }
    // SAFETY: a system call with plain values and a filled siginfo_t.
    unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            pid as libc::c_long,
            tid as libc::c_long,
            sig as libc::c_long,
            &info as *const libc::siginfo_t,
        );
    }
}

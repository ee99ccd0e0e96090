//! The random-operation harness: seeded sequences of hwpmc system calls
//! (valid ones and garbage) and machine events (fork, exec, exit, threads,
//! mappings, modules, context switches, clock ticks, page faults, CPUs
//! going away and coming back, sysctl changes, descriptors closed,
//! allocations failing) run against the driver on the simulated machine.
//! After every step the driver's invariants are checked:
//!
//! - no soft event is armed beyond what running PMCs need, and none is
//!   disarmed below zero;
//! - every owner counts exactly its running system samplers;
//! - samples taken equal samples logged, plus samples dropped unlogged,
//!   plus samples still in the rings;
//! - the statistics only grow, and failures never exceed attempts;
//! - the witness saw no violation.
//!
//! At the end the driver is unloaded and: every log parses, ends with
//! CLOSELOG (written once, last) and holds every user record whose
//! WRITELOG succeeded, and no other; no kernel memory and no kernel process is
//! left. A failing sequence is shrunk to a shortest one that still fails.

use std::collections::BTreeMap;
use std::fmt;
use std::mem::{offset_of, size_of};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use hwpmc::{Module, PmcView};
use ksim::{CpuState, Cred, FileKind, Machine, MachineConfig, NotifyRead, UserProt};
use uapi::pmc::*;
use uapi::pmclog::{PmclogBody, records};
use uapi::{AsBytes, Plain};

/// splitmix64: a small, well-known generator; the same seed gives the
/// same sequence on every host.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    fn idx(&mut self) -> u16 {
        self.next_u64() as u16
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The machine's CPUs: 0 to 3, with CPU 0 never taken away.
const NCPU: u8 = 4;
/// The soft events the harness uses, by name.
const EVENTS: [&str; 3] = ["CLOCK.HARD", "PAGE_FAULT.ALL", "CLOCK.STAT"];

/// One step. Processes, threads, PMCs and descriptors are named by index
/// into what the run has made so far (modulo its length), so that any
/// subsequence of a sequence still runs: shrinking removes steps freely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A new process (root or an unprivileged user).
    Spawn { root: bool },
    /// fork(2).
    Fork { proc: u16 },
    /// execve(2), set-id or not.
    Exec { proc: u16, setid: bool },
    /// exit(2): its first half (P_WEXIT, the exit handlers) now; the
    /// process stays there, exiting, until it finishes.
    Exit { proc: u16 },
    /// An exiting process finishes exiting (a zombie).
    FinishExit { proc: u16 },
    /// wait(2) reaps a zombie: its pid may be reused.
    Reap { proc: u16 },
    /// The reader of a process's pipes reads them.
    Drain { proc: u16 },
    /// The argument of the next system call straddles a page boundary, and
    /// the second page is read-only (copyin works, copyout faults half
    /// way) or unmapped.
    FaultNext { readonly: bool },
    /// A new thread.
    ThreadCreate { proc: u16 },
    /// A thread exits.
    ThreadExit { proc: u16, thread: u16 },
    /// A thread is renamed (thr_set_name(2)).
    ThreadName { proc: u16, thread: u16 },
    /// mmap(2) of a library.
    Mmap { proc: u16, slot: u8 },
    /// munmap(2) of it.
    Munmap { proc: u16, slot: u8 },
    /// kldload(2) / kldunload(2).
    Kld { load: bool, slot: u8 },
    /// A thread goes on a CPU.
    SwitchIn { cpu: u8, proc: u16, thread: u16 },
    /// The CPU's thread goes off it.
    SwitchOut { cpu: u8 },
    /// A clock tick on one CPU.
    Tick { cpu: u8 },
    /// A clock tick on every CPU.
    TickAll,
    /// `n` page faults in a row on a CPU, with no clock tick between
    /// them (so that sample rings fill).
    PageFault { cpu: u8, n: u8 },
    /// A CPU goes away or comes back.
    Cpu { cpu: u8, online: bool },
    /// A sysctl changes.
    Sysctl { which: u8, value: i64 },
    /// PMC_OP_PMCALLOCATE with fields drawn at random.
    Allocate {
        proc: u16,
        event: u8,
        mode: u8,
        cpu: u8,
        flags: u32,
        count: u64,
        class: u8,
    },
    /// An operation on one PMC.
    Pmc { proc: u16, pmc: u16, what: PmcCall },
    /// PMC_OP_CONFIGURELOG on a new descriptor of the given kind.
    ConfigureLog { proc: u16, kind: u8 },
    /// PMC_OP_CONFIGURELOG with -1.
    DeconfigureLog { proc: u16 },
    /// PMC_OP_FLUSHLOG.
    FlushLog { proc: u16 },
    /// PMC_OP_CLOSELOG.
    CloseLog { proc: u16 },
    /// PMC_OP_WRITELOG.
    WriteLog { proc: u16 },
    /// close(2) of one of the process's descriptors.
    CloseFd { proc: u16, fd: u16 },
    /// PMC_OP_PMCADMIN of a row.
    Admin {
        proc: u16,
        cpu: u8,
        ri: u8,
        enable: bool,
    },
    /// PMC_OP_GETPMCINFO and PMC_OP_GETDRIVERSTATS.
    Info { proc: u16, cpu: u8 },
    /// A random operation number with random argument bytes.
    Garbage { proc: u16, op: u32, bytes: Vec<u8> },
    /// A valid operation with an unmapped argument pointer.
    BadPointer { proc: u16, op: u8 },
    /// The `nth` kernel allocation of the next step fails.
    FailAlloc { nth: u8 },
    /// Kernel work on several CPUs at once, interleaved at kpi's locks and
    /// allocations as `seed` decides (ksim::sched): a system call (`call`)
    /// by a process on its CPU, against a clock tick or page faults on
    /// another CPU and, with `writers`, the log writers' passes.
    Race {
        seed: u32,
        proc: u16,
        pmc: u16,
        call: u8,
        cpu: u8,
        faults: bool,
        writers: bool,
    },
    /// What pmcstat does to profile: a log (when the process has none), a
    /// sampling PMC on the clock (system-wide on `cpu`, or attached to
    /// `target` with call chains when `chains`), and PMCSTART.
    Profile {
        proc: u16,
        system: bool,
        cpu: u8,
        target: u16,
        chains: bool,
    },
}

/// A notification descriptor the run made.
#[derive(Debug)]
struct Notified {
    /// The PMC's owner (a descendant that inherited it may have asked).
    owner: u32,
    id: PmcId,
    file: u64,
    /// Samples per notification (0: log bytes).
    count: u32,
    refresh: u32,
    last: PmcNotification,
}

/// Operations on one PMC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmcCall {
    /// PMC_OP_PMCATTACH to a process.
    Attach { target: u16 },
    /// PMC_OP_PMCDETACH from a process.
    Detach { target: u16 },
    /// PMC_OP_PMCSTART.
    Start,
    /// PMC_OP_PMCSTOP.
    Stop,
    /// PMC_OP_PMCRELEASE.
    Release,
    /// PMC_OP_PMCRW, reading.
    Read,
    /// PMC_OP_PMCRW, writing.
    Write { value: u64 },
    /// PMC_OP_PMCSETCOUNT.
    SetCount { count: u64 },
    /// PMC_OP_GETCAPS.
    Caps,
    /// PMC_OP_PMCGETMSR.
    GetMsr,
    /// PMC_OP_EXT_NOTIFY: every `count` samples (log bytes with `bytes`),
    /// stopping after `refresh` overflows unless 0, with signal `signo`.
    Notify {
        count: u32,
        refresh: u32,
        bytes: bool,
        signo: i32,
    },
}

impl Op {
    /// A random step.
    pub fn random(r: &mut Rng) -> Op {
        let proc = r.idx();
        match r.below(140) {
            0..=1 => Op::Spawn { root: r.chance(70) },
            2..=4 => Op::Fork { proc },
            5..=6 => Op::Exec {
                proc,
                setid: r.chance(30),
            },
            7..=8 => Op::Exit { proc },
            9 => Op::ThreadCreate { proc },
            10 => Op::ThreadName {
                proc,
                thread: r.idx(),
            },
            11 => Op::ThreadExit {
                proc,
                thread: r.idx(),
            },
            12 => Op::Mmap {
                proc,
                slot: r.below(4) as u8,
            },
            13 => Op::Munmap {
                proc,
                slot: r.below(4) as u8,
            },
            14 => Op::Kld {
                load: r.chance(50),
                slot: r.below(2) as u8,
            },
            15..=26 => Op::SwitchIn {
                cpu: r.below(NCPU as u64) as u8,
                proc,
                thread: r.idx(),
            },
            27..=29 => Op::SwitchOut {
                cpu: r.below(NCPU as u64) as u8,
            },
            30..=38 => Op::Tick {
                cpu: r.below(NCPU as u64) as u8,
            },
            39..=43 => Op::TickAll,
            44..=48 => Op::PageFault {
                cpu: r.below(NCPU as u64) as u8,
                n: 1 + r.below(6) as u8,
            },
            49 => Op::Cpu {
                cpu: 1 + r.below(NCPU as u64 - 1) as u8,
                online: r.chance(50),
            },
            50 => Op::Sysctl {
                which: r.below(4) as u8,
                value: r.below(3) as i64,
            },
            51..=61 => Op::Allocate {
                proc,
                // Mostly the clock, which every tick fires; TSC last.
                event: [0, 0, 0, 0, 1, 1, 2, 3][r.below(8) as usize],
                mode: r.below(5) as u8,
                cpu: r.below(NCPU as u64 + 1) as u8,
                flags: if r.chance(70) {
                    [
                        0,
                        PmcFlags::DESCENDANTS.bits(),
                        PmcFlags::CALLCHAIN.bits(),
                        (PmcFlags::CALLCHAIN | PmcFlags::USERCALLCHAIN).bits(),
                        PmcFlags::LOG_PROCCSW.bits(),
                        PmcFlags::LOG_PROCEXIT.bits(),
                    ][r.below(6) as usize]
                } else {
                    r.next_u64() as u32
                },
                count: [0, 1, 2, 5, 1000, r.next_u64()][r.below(6) as usize],
                class: r.below(10) as u8,
            },
            62..=81 => Op::Pmc {
                proc,
                pmc: r.idx(),
                what: match r.below(14) {
                    0..=1 => PmcCall::Attach { target: r.idx() },
                    2 => PmcCall::Detach { target: r.idx() },
                    3..=5 => PmcCall::Start,
                    6..=7 => PmcCall::Stop,
                    8 => PmcCall::Release,
                    9 => PmcCall::Read,
                    10 => PmcCall::Write { value: r.below(50) },
                    11 => PmcCall::SetCount { count: r.below(20) },
                    12 => PmcCall::Caps,
                    13 if r.chance(50) => PmcCall::Notify {
                        count: [0, 1, 1, 2, 3, 64, 200][r.below(7) as usize],
                        refresh: [0, 0, 1, 2, 5][r.below(5) as usize],
                        bytes: r.chance(25),
                        signo: [0, 30, 65, 9, -1][r.below(5) as usize],
                    },
                    _ => PmcCall::GetMsr,
                },
            },
            82..=85 => Op::ConfigureLog {
                proc,
                kind: r.below(11) as u8,
            },
            86 => Op::DeconfigureLog { proc },
            87..=88 => Op::FlushLog { proc },
            89 => Op::CloseLog { proc },
            90..=93 => Op::WriteLog { proc },
            94 => Op::CloseFd { proc, fd: r.idx() },
            95 => Op::Admin {
                proc,
                cpu: r.below(NCPU as u64 + 1) as u8,
                ri: r.below(20) as u8,
                enable: r.chance(60),
            },
            96..=97 => Op::Info {
                proc,
                cpu: r.below(NCPU as u64 + 1) as u8,
            },
            98..=99 => Op::Garbage {
                proc,
                op: if r.chance(60) {
                    r.below(24) as u32
                } else if r.chance(20) {
                    PMC_OP_EXT_BASE + r.below(3) as u32
                } else {
                    r.next_u64() as u32
                },
                bytes: (0..r.below(64)).map(|_| r.next_u64() as u8).collect(),
            },
            100 => Op::BadPointer {
                proc,
                op: r.below(20) as u8,
            },
            115..=116 => Op::FinishExit { proc },
            117..=118 => Op::Reap { proc },
            119..=120 => Op::Drain { proc },
            125..=136 => Op::Race {
                seed: r.next_u64() as u32,
                proc,
                pmc: r.idx(),
                call: r.below(10) as u8,
                cpu: r.below(NCPU as u64) as u8,
                faults: r.chance(40),
                writers: r.chance(60),
            },
            121 => Op::FaultNext {
                readonly: r.chance(60),
            },
            104..=111 => Op::Profile {
                proc,
                system: r.chance(50),
                cpu: r.below(NCPU as u64) as u8,
                target: r.idx(),
                chains: r.chance(50),
            },
            _ => Op::FailAlloc {
                nth: 1 + r.below(12) as u8,
            },
        }
    }
}

/// What was wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Steps run before the failure was seen (the failing step included).
    pub step: usize,
    /// The broken invariant.
    pub what: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "after step {}: {}", self.step, self.what)
    }
}

#[derive(Debug)]
struct Proc {
    pid: u32,
    threads: Vec<u32>,
    alive: bool,
    /// Exit begun (its exit handlers ran); a zombie once finished.
    exiting: bool,
    zombie: bool,
    reaped: bool,
    fds: Vec<i32>,
    maps: [bool; 4],
}

impl Proc {
    /// A live process with one thread and the given library mappings.
    fn new(pid: u32, tid: u32, maps: [bool; 4]) -> Proc {
        Proc {
            pid,
            threads: vec![tid],
            alive: true,
            exiting: false,
            zombie: false,
            reaped: false,
            fds: Vec::new(),
            maps,
        }
    }
}

/// A log the run configured: its file, and the user records it must hold.
#[derive(Debug)]
struct Log {
    owner: u32,
    file: u64,
    /// Writes to this file can fail (a full or failing device): only the
    /// records before the failure are there.
    may_fail: bool,
    cookies: Vec<u32>,
    active: bool,
}

/// One run of a sequence on a fresh machine.
struct Run {
    m: Machine,
    module: Option<Module>,
    sysnum: u32,
    procs: Vec<Proc>,
    pmcs: Vec<(u32, PmcId)>,
    logs: Vec<Log>,
    /// Notification descriptors made: (owner, PMC, kernel file, the
    /// refresh count asked for, the last record read).
    notified: Vec<Notified>,
    klds: [bool; 2],
    fault_next: Option<UserProt>,
    /// Hand-overs between concurrent pieces of kernel work so far.
    switches: u64,
    next_cookie: u32,
    fail_next: Option<u64>,
    last_stats: [u64; 8],
}

fn kind_of(k: u8) -> (FileKind, bool) {
    match k {
        0..=3 => (FileKind::Regular, false),
        4 => (FileKind::Pipe, false),
        5 => (FileKind::Socket, false),
        6 => (FileKind::Full, true),
        8 => (FileKind::Short { max: 5 }, false),
        9 => (FileKind::Interrupting { every: 3 }, false),
        10 => (FileKind::BoundedPipe { capacity: 3000 }, false),
        _ => (
            FileKind::Failing {
                after: 200,
                errno: 5,
            },
            true,
        ),
    }
}

fn pick<T>(v: &[T], i: u16) -> Option<&T> {
    if v.is_empty() {
        None
    } else {
        v.get(i as usize % v.len())
    }
}

impl Run {
    fn new() -> Run {
        // Few pids, so that reaped ones come back.
        let cfg = MachineConfig {
            cpus: vec![CpuState::Online; NCPU as usize],
            pid_max: 230,
            ..MachineConfig::default()
        };
        let m = Machine::new(cfg);
        let enter = m.enter();
        m.kenv_set("kern.hwpmc.nsamples", "2");
        m.kenv_set("kern.hwpmc.nbuffers_pcpu", "2");
        m.kenv_set("kern.hwpmc.logbuffersize", "4");
        m.kenv_set("kern.hwpmc.mincount", "1");
        let (_, kld) = m.spawn(Cred::root(), "kldload");
        let module = m.in_thread(kld, Module::load).expect("hwpmc loads");
        drop(enter);
        let sysnum = module.syscall_number();
        Run {
            m,
            module: Some(module),
            sysnum,
            procs: Vec::new(),
            pmcs: Vec::new(),
            logs: Vec::new(),
            notified: Vec::new(),
            klds: [false; 2],
            fault_next: None,
            switches: 0,
            next_cookie: 1,
            fail_next: None,
            last_stats: [0; 8],
        }
    }

    fn driver(&self) -> &hwpmc::Hwpmc {
        self.module.as_ref().expect("loaded").driver()
    }

    /// Whether the machine has room for another process: pids are few,
    /// and zombies and kernel processes hold theirs.
    fn room_for_process(&self) -> bool {
        self.procs.iter().filter(|p| !p.reaped).count() < 90
    }

    fn spawn(&mut self, root: bool) {
        if !self.room_for_process() {
            return;
        }
        let cred = if root { Cred::root() } else { Cred::user(1001) };
        let (pid, tid) = self.m.spawn(cred, "w");
        self.procs.push(Proc::new(pid, tid, [false; 4]));
    }

    /// A live process: mostly one of the first few, so that the same
    /// processes allocate, log, start and run, as real programs do.
    fn live(&self, i: u16) -> Option<usize> {
        let alive: Vec<usize> = (0..self.procs.len())
            .filter(|&k| self.procs[k].alive)
            .collect();
        if i % 10 < 7 {
            pick(&alive[..alive.len().min(4)], i / 10)
        } else {
            pick(&alive, i / 10)
        }
        .copied()
    }

    /// Makes room for a kernel call by `tid`: a thread that is not on a
    /// CPU needs an idle one, so the scheduler preempts CPU 0's thread.
    fn room_for(&self, tid: u32) {
        let on_cpu = (0..NCPU as u32).any(|c| self.m.running_on(c) == Some(tid));
        let idle = (0..NCPU as u32)
            .any(|c| self.m.cpu_state(c) == CpuState::Online && self.m.running_on(c).is_none());
        if !on_cpu && !idle {
            self.m.switch_out(0);
        }
    }

    fn syscall(&mut self, p: usize, op: u32, bytes: &mut [u8]) -> Result<(), i32> {
        let fault = self.fault_next.take();
        let pr = &self.procs[p];
        self.room_for(pr.threads[0]);
        let uaddr = match fault {
            None => self.m.user_alloc(pr.pid, bytes.len().max(1)),
            Some(prot) => {
                // Four bytes on a good page, the rest on a bad one.
                let base = self.m.user_alloc(pr.pid, 2 * ksim::PAGE_SIZE as usize);
                let second = base + ksim::PAGE_SIZE;
                self.m.user_protect(pr.pid, second, ksim::PAGE_SIZE, prot);
                second - 4
            }
        };
        self.m.user_write(pr.pid, uaddr, bytes);
        let r = self
            .m
            .syscall(pr.threads[0], self.sysnum, &[op as u64, uaddr]);
        let back = self.m.user_read(pr.pid, uaddr, bytes.len());
        bytes.copy_from_slice(&back);
        r.map(|_| ())
    }

    fn call<T: AsBytes>(&mut self, p: usize, op: PmcOp, arg: &mut T) -> Result<(), i32> {
        let mut bytes = arg.as_bytes().to_vec();
        let r = self.syscall(p, op.raw(), &mut bytes);
        *arg = T::read_from(&bytes).expect("same size");
        r
    }

    fn soft_code(&self, name: &str) -> u32 {
        self.m
            .soft_events()
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.code)
            .expect("a kernel soft event")
    }

    fn step(&mut self, op: &Op) {
        let fail = self.fail_next.take();
        if let Some(n) = fail {
            self.m.fail_alloc_in(n);
        }
        self.apply(op);
        if fail.is_some() {
            self.m.clear_alloc_failure();
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Spawn { root } => self.spawn(root),
            Op::Fork { proc } => {
                if let (Some(p), true) = (self.live(proc), self.room_for_process()) {
                    let (pid, tid) = self.m.fork(self.procs[p].pid);
                    let maps = self.procs[p].maps;
                    self.procs.push(Proc::new(pid, tid, maps));
                }
            }
            Op::Exec { proc, setid } => {
                if let Some(p) = self.live(proc) {
                    let cred = setid.then(|| Cred::user(1002));
                    self.m.exec(self.procs[p].pid, "/usr/bin/yes", cred);
                    self.procs[p].maps = [false; 4];
                }
            }
            Op::Exit { proc } => {
                if let Some(p) = self.live(proc) {
                    self.m.exit_begin(self.procs[p].pid);
                    self.procs[p].alive = false;
                    self.procs[p].exiting = true;
                    for l in self.logs.iter_mut() {
                        if l.owner == self.procs[p].pid {
                            l.active = false;
                        }
                    }
                }
            }
            Op::FinishExit { proc } => {
                let exiting: Vec<usize> = (0..self.procs.len())
                    .filter(|&k| self.procs[k].exiting && !self.procs[k].zombie)
                    .collect();
                if let Some(&p) = pick(&exiting, proc) {
                    self.finish_exit(p);
                }
            }
            Op::Reap { proc } => {
                let zombies: Vec<usize> = (0..self.procs.len())
                    .filter(|&k| self.procs[k].zombie && !self.procs[k].reaped)
                    .collect();
                if let Some(&p) = pick(&zombies, proc) {
                    self.m.reap(self.procs[p].pid);
                    self.procs[p].reaped = true;
                }
            }
            Op::Drain { proc } => {
                if let Some(p) = self.live(proc) {
                    let pid = self.procs[p].pid;
                    let files: Vec<u64> = self
                        .logs
                        .iter()
                        .filter(|l| l.owner == pid)
                        .map(|l| l.file)
                        .collect();
                    for f in files {
                        self.m.drain(f);
                    }
                }
            }
            Op::FaultNext { readonly } => {
                self.fault_next = Some(if readonly {
                    UserProt::ReadOnly
                } else {
                    UserProt::None
                })
            }
            Op::ThreadCreate { proc } => {
                if let Some(p) = self.live(proc) {
                    let tid = self.m.thread_create(self.procs[p].pid);
                    self.procs[p].threads.push(tid);
                }
            }
            Op::ThreadExit { proc, thread } => {
                if let Some(p) = self.live(proc) {
                    // The first thread stays: it makes the system calls.
                    let n = self.procs[p].threads.len();
                    if n > 1 {
                        let k = 1 + thread as usize % (n - 1);
                        let tid = self.procs[p].threads.remove(k);
                        self.m.thread_exit(tid);
                    }
                }
            }
            Op::ThreadName { proc, thread } => {
                if let Some(p) = self.live(proc) {
                    let n = self.procs[p].threads.len();
                    let tid = self.procs[p].threads[thread as usize % n];
                    self.m.thread_set_name(tid, "renamed");
                }
            }
            Op::Mmap { proc, slot } | Op::Munmap { proc, slot } => {
                if let Some(p) = self.live(proc) {
                    let map = matches!(op, Op::Mmap { .. });
                    let addr = 0x8_0000_0000 + slot as u64 * 0x100_0000;
                    let pid = self.procs[p].pid;
                    let was = self.procs[p].maps[slot as usize];
                    if map && !was {
                        self.m.mmap(pid, "/lib/libc.so.7", addr, 0x10_0000);
                    } else if !map && was {
                        self.m.munmap(pid, addr, 0x10_0000);
                    }
                    self.procs[p].maps[slot as usize] = map;
                }
            }
            Op::Kld { load, slot } => {
                let addr = 0xffff_ffff_9000_0000 + slot as u64 * 0x10_0000;
                if let Some(p) = self.live(0) {
                    let tid = self.procs[p].threads[0];
                    self.room_for(tid);
                    if load && !self.klds[slot as usize] {
                        self.m.kld_load(tid, "/boot/kernel/if_em.ko", addr, 0x8000);
                        self.klds[slot as usize] = true;
                    } else if !load && self.klds[slot as usize] {
                        self.m.kld_unload(tid, addr);
                        self.klds[slot as usize] = false;
                    }
                }
            }
            Op::SwitchIn { cpu, proc, thread } => {
                let Some(p) = self.live(proc) else { return };
                let tid = *pick(&self.procs[p].threads, thread).expect("a thread");
                let free = self.m.running_on(cpu as u32).is_none();
                let online = self.m.cpu_state(cpu as u32) == CpuState::Online;
                let elsewhere = (0..NCPU as u32).any(|c| self.m.running_on(c) == Some(tid));
                if free && online && !elsewhere {
                    self.m.switch_in(cpu as u32, tid);
                }
            }
            Op::SwitchOut { cpu } => self.m.switch_out(cpu as u32),
            Op::Tick { cpu } => {
                if self.m.cpu_state(cpu as u32) == CpuState::Online {
                    self.m.tick(cpu as u32);
                }
            }
            Op::TickAll => self.m.tick_all(),
            Op::PageFault { cpu, n } => {
                if self.m.cpu_state(cpu as u32) == CpuState::Online {
                    for _ in 0..n {
                        self.m.soft_event(cpu as u32, "PAGE_FAULT.ALL");
                    }
                }
            }
            Op::Cpu { cpu, online } => {
                let cpu = cpu as u32;
                if online {
                    self.m.set_cpu_state(cpu, CpuState::Online);
                } else {
                    // A CPU is emptied before it goes away.
                    self.m.switch_out(cpu);
                    self.m.set_cpu_state(cpu, CpuState::Disabled);
                }
            }
            Op::Sysctl { which, value } => match which {
                0 => self
                    .m
                    .sysctl_set("security.bsd.unprivileged_syspmcs", value & 1),
                1 => self
                    .m
                    .sysctl_set("security.bsd.unprivileged_proc_debug", value & 1),
                2 => self.m.sysctl_set("kern.hwpmc.mincount", 1 + value * 4),
                _ => self.m.sysctl_set("kern.hwpmc.threadfreelist_max", value),
            },
            Op::Allocate {
                proc,
                event,
                mode,
                cpu,
                flags,
                count,
                class,
            } => {
                let Some(p) = self.live(proc) else { return };
                let ev = match EVENTS.get(event as usize) {
                    Some(name) => self.soft_code(name),
                    None => uapi::pmc_events::PMC_EV_TSC_TSC,
                };
                let pmc_class = match class {
                    0..=6 => {
                        if EVENTS.get(event as usize).is_some() {
                            PmcClass::Soft.raw()
                        } else {
                            PmcClass::Tsc.raw()
                        }
                    }
                    7 => PmcClass::Tsc.raw(),
                    8 => PmcClass::Soft.raw(),
                    _ => 0x77,
                };
                let mut b = vec![0u8; size_of::<PmcOpPmcallocate>()];
                let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
                // The driver adds INTERRUPT for the sampling modes.
                let caps = PmcCaps::READ.bits();
                put(offset_of!(PmcOpPmcallocate, pm_caps), &caps.to_ne_bytes());
                // Mostly the CPU the mode wants: any for process modes, one
                // for system modes.
                let process_mode = mode == 2 || mode == 3;
                let cpu = if (cpu == NCPU) != process_mode && count % 5 != 0 {
                    if process_mode {
                        PMC_CPU_ANY
                    } else {
                        cpu as u32 % NCPU as u32
                    }
                } else if cpu >= NCPU {
                    PMC_CPU_ANY
                } else {
                    cpu as u32
                };
                put(offset_of!(PmcOpPmcallocate, pm_cpu), &cpu.to_ne_bytes());
                put(
                    offset_of!(PmcOpPmcallocate, pm_class),
                    &pmc_class.to_ne_bytes(),
                );
                put(offset_of!(PmcOpPmcallocate, pm_ev), &ev.to_ne_bytes());
                put(offset_of!(PmcOpPmcallocate, pm_flags), &flags.to_ne_bytes());
                // Modes: SS, SC, TS, TC, and an invalid one.
                let m = [0u32, 1, 2, 3, 9][mode as usize % 5];
                put(offset_of!(PmcOpPmcallocate, pm_mode), &m.to_ne_bytes());
                put(offset_of!(PmcOpPmcallocate, pm_count), &count.to_ne_bytes());
                if self.syscall(p, PmcOp::Pmcallocate.raw(), &mut b).is_ok() {
                    let off = offset_of!(PmcOpPmcallocate, pm_pmcid);
                    let id = u32::from_ne_bytes(b[off..off + 4].try_into().expect("4 bytes"));
                    self.pmcs.push((self.procs[p].pid, id));
                }
            }
            Op::Pmc { proc, pmc, what } => self.pmc_call(proc, pmc, what),
            Op::ConfigureLog { proc, kind } => {
                let Some(p) = self.live(proc) else { return };
                let (k, may_fail) = kind_of(kind);
                let pid = self.procs[p].pid;
                let fd = self.m.open(pid, k, true);
                self.procs[p].fds.push(fd);
                let mut cl = PmcOpConfigurelog {
                    pm_flags: 0,
                    pm_logfd: fd,
                };
                if self.call(p, PmcOp::Configurelog, &mut cl).is_ok() {
                    let file = self.m.file_of(pid, fd).expect("open");
                    self.logs.push(Log {
                        owner: pid,
                        file,
                        may_fail,
                        cookies: Vec::new(),
                        active: true,
                    });
                }
            }
            Op::DeconfigureLog { proc } => {
                let Some(p) = self.live(proc) else { return };
                let mut cl = PmcOpConfigurelog {
                    pm_flags: 0,
                    pm_logfd: -1,
                };
                if self.call(p, PmcOp::Configurelog, &mut cl).is_ok() {
                    let pid = self.procs[p].pid;
                    for l in self.logs.iter_mut().filter(|l| l.owner == pid) {
                        l.active = false;
                    }
                }
            }
            Op::FlushLog { proc } => {
                if let Some(p) = self.live(proc) {
                    let _ = self.call(p, PmcOp::Flushlog, &mut PmcOpSimple { pm_pmcid: 0 });
                }
            }
            Op::CloseLog { proc } => {
                if let Some(p) = self.live(proc) {
                    let _ = self.call(p, PmcOp::Closelog, &mut PmcOpSimple { pm_pmcid: 0 });
                }
            }
            Op::WriteLog { proc } => {
                let Some(p) = self.live(proc) else { return };
                let cookie = self.next_cookie;
                self.next_cookie += 1;
                let ok = self
                    .call(
                        p,
                        PmcOp::Writelog,
                        &mut PmcOpWritelog {
                            pm_userdata: cookie,
                        },
                    )
                    .is_ok();
                if ok {
                    let pid = self.procs[p].pid;
                    self.user_record_logged(pid, cookie);
                }
            }
            Op::CloseFd { proc, fd } => {
                if let Some(p) = self.live(proc) {
                    if let Some(&f) = pick(&self.procs[p].fds, fd) {
                        self.m.close(self.procs[p].pid, f);
                        self.procs[p].fds.retain(|&x| x != f);
                    }
                }
            }
            Op::Admin {
                proc,
                cpu,
                ri,
                enable,
            } => {
                if let Some(p) = self.live(proc) {
                    let mut a = PmcOpPmcadmin {
                        pm_cpu: if cpu >= NCPU { -1 } else { cpu as i32 },
                        pm_flags: 0,
                        pm_pmc: ri as i32,
                        pm_state: if enable {
                            PmcState::Free.raw()
                        } else {
                            PmcState::Disabled.raw()
                        },
                    };
                    let _ = self.call(p, PmcOp::Pmcadmin, &mut a);
                }
            }
            Op::Info { proc, cpu } => {
                if let Some(p) = self.live(proc) {
                    let len = size_of::<PmcOpGetpmcinfo>() + 32 * size_of::<PmcInfo>();
                    let mut b = vec![0u8; len];
                    b[..4].copy_from_slice(&(cpu as u32).to_ne_bytes());
                    let _ = self.syscall(p, PmcOp::Getpmcinfo.raw(), &mut b);
                    let mut st = PmcOpGetdriverstats::zeroed();
                    let _ = self.call(p, PmcOp::Getdriverstats, &mut st);
                }
            }
            Op::Garbage {
                proc,
                op,
                ref bytes,
            } => {
                if let Some(p) = self.live(proc) {
                    let mut b = bytes.clone();
                    let ok = self.syscall(p, op, &mut b).is_ok();
                    // A WRITELOG among the garbage logs its bytes too.
                    if ok && op == PmcOp::Writelog.raw() {
                        // The driver read four bytes; past the ones given,
                        // the (zeroed) memory they were placed in.
                        let mut word = [0u8; 4];
                        let n = b.len().min(4);
                        word[..n].copy_from_slice(&b[..n]);
                        let cookie = u32::from_ne_bytes(word);
                        let pid = self.procs[p].pid;
                        self.user_record_logged(pid, cookie);
                    }
                }
            }
            Op::BadPointer { proc, op } => {
                if let Some(p) = self.live(proc) {
                    let tid = self.procs[p].threads[0];
                    self.room_for(tid);
                    let _ = self.m.syscall(tid, self.sysnum, &[op as u64, 0xdead_0000]);
                }
            }
            Op::FailAlloc { nth } => self.fail_next = Some(nth as u64),
            Op::Profile {
                proc,
                system,
                cpu,
                target,
                chains,
            } => self.profile(proc, system, cpu, target, chains),
            Op::Race {
                seed,
                proc,
                pmc,
                call,
                cpu,
                faults,
                writers,
            } => self.race(seed as u64, proc, pmc, call, cpu, faults, writers),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn race(
        &mut self,
        seed: u64,
        proc: u16,
        pmc: u16,
        call: u8,
        cpu: u8,
        faults: bool,
        writers: bool,
    ) {
        let Some(p) = self.live(proc) else { return };
        let pid = self.procs[p].pid;
        let tid = self.procs[p].threads[0];
        // The caller on a CPU of its own, the interrupt on another.
        let online: Vec<u32> = (0..NCPU as u32)
            .filter(|&c| self.m.cpu_state(c) == CpuState::Online)
            .collect();
        let mine = match (0..NCPU as u32).find(|&c| self.m.running_on(c) == Some(tid)) {
            Some(c) => c,
            None => match online.iter().find(|&&c| self.m.running_on(c).is_none()) {
                Some(&c) => {
                    self.m.switch_in(c, tid);
                    c
                }
                None => return,
            },
        };
        let others: Vec<u32> = online.iter().copied().filter(|&c| c != mine).collect();
        let other = pick(&others, cpu as u16).copied();
        // The call: on one of the caller's PMCs, or on its log.
        let own: Vec<PmcId> = self
            .pmcs
            .iter()
            .filter(|(o, _)| *o == pid)
            .map(|(_, id)| *id)
            .collect();
        let id = pick(&own, pmc).copied().unwrap_or(0);
        let simple = |id: PmcId| PmcOpSimple { pm_pmcid: id }.as_bytes().to_vec();
        let cookie = self.next_cookie;
        let (op, bytes) = match call {
            0 => (PmcOp::Pmcstart, simple(id)),
            1 => (PmcOp::Pmcstop, simple(id)),
            2 => (PmcOp::Pmcrelease, simple(id)),
            3 => (
                PmcOp::Pmcrw,
                PmcOpPmcrw {
                    pm_pmcid: id,
                    pm_flags: PmcFlags::OLDVALUE.bits(),
                    pm_value: 0,
                }
                .as_bytes()
                .to_vec(),
            ),
            4 => (
                PmcOp::Pmcattach,
                PmcOpPmcattach {
                    pm_pmc: id,
                    pm_pid: 0,
                }
                .as_bytes()
                .to_vec(),
            ),
            5 => {
                self.next_cookie += 1;
                (
                    PmcOp::Writelog,
                    PmcOpWritelog {
                        pm_userdata: cookie,
                    }
                    .as_bytes()
                    .to_vec(),
                )
            }
            6 => (PmcOp::Flushlog, simple(0)),
            7 => (PmcOp::Closelog, simple(0)),
            8 => (
                PmcOp::Configurelog,
                PmcOpConfigurelog {
                    pm_flags: 0,
                    pm_logfd: -1,
                }
                .as_bytes()
                .to_vec(),
            ),
            _ => (
                PmcOp::Pmcdetach,
                PmcOpPmcattach {
                    pm_pmc: id,
                    pm_pid: 0,
                }
                .as_bytes()
                .to_vec(),
            ),
        };
        let uaddr = self.m.user_alloc(pid, bytes.len());
        self.m.user_write(pid, uaddr, &bytes);
        // A second thread of the caller, on the other CPU, logging a user
        // record at the same time (when the process has one and that CPU
        // is free for it).
        let t2_cpu = |t2: u32| (0..NCPU as u32).find(|&c| self.m.running_on(c) == Some(t2));
        let second = match (self.procs[p].threads.get(1), other) {
            (Some(&t2), Some(c))
                if !faults
                    && t2_cpu(t2).is_none_or(|x| x != mine)
                    && (t2_cpu(t2).is_some() || self.m.running_on(c).is_none()) =>
            {
                if t2_cpu(t2).is_none() {
                    self.m.switch_in(c, t2);
                }
                let cookie2 = self.next_cookie;
                self.next_cookie += 1;
                let arg = PmcOpWritelog {
                    pm_userdata: cookie2,
                };
                let ua = self.m.user_alloc(pid, 4);
                self.m.user_write(pid, ua, arg.as_bytes());
                Some((t2, ua, cookie2))
            }
            _ => None,
        };
        let result2 = Mutex::new(None);
        let result = Mutex::new(None);
        let (m, sysnum) = (&self.m, self.sysnum);
        let mut pieces: Vec<ksim::sched::Piece<'_>> = vec![Box::new(|| {
            let r = m.syscall(tid, sysnum, &[op.raw() as u64, uaddr]);
            *result.lock().expect("not poisoned") = Some(r);
        })];
        if let Some((t2, ua, _)) = second {
            let result2 = &result2;
            pieces.push(Box::new(move || {
                let r = m.syscall(t2, sysnum, &[PmcOp::Writelog.raw() as u64, ua]);
                *result2.lock().expect("not poisoned") = Some(r);
            }));
        } else if let Some(c) = other {
            pieces.push(Box::new(move || {
                if faults {
                    for _ in 0..3 {
                        m.soft_event(c, "PAGE_FAULT.ALL");
                    }
                } else {
                    m.tick(c);
                }
            }));
        }
        if writers {
            pieces.push(Box::new(move || m.wake_kprocs()));
        }
        self.switches += m.race(seed, pieces);
        if let (Some((_, _, cookie2)), Some(Ok(_))) =
            (second, result2.into_inner().expect("not poisoned"))
        {
            self.user_record_logged(pid, cookie2);
        }
        let ok = matches!(result.into_inner().expect("not poisoned"), Some(Ok(_)));
        if !ok {
            return;
        }
        match op {
            PmcOp::Pmcrelease => self.pmcs.retain(|(_, x)| *x != id),
            PmcOp::Writelog => {
                self.user_record_logged(pid, cookie);
            }
            PmcOp::Configurelog => {
                for l in self.logs.iter_mut().filter(|l| l.owner == pid) {
                    l.active = false;
                }
            }
            _ => {}
        }
    }

    fn profile(&mut self, proc: u16, system: bool, cpu: u8, target: u16, chains: bool) {
        let Some(p) = self.live(proc) else { return };
        let pid = self.procs[p].pid;
        if !self.logs.iter().any(|l| l.owner == pid && l.active) {
            self.apply(&Op::ConfigureLog { proc, kind: 0 });
        }
        let before = self.pmcs.len();
        let flags = if chains {
            (PmcFlags::CALLCHAIN | PmcFlags::USERCALLCHAIN).bits()
        } else {
            0
        };
        self.apply(&Op::Allocate {
            proc,
            // The clock, or page faults, which no hardclock follows.
            event: if cpu % 2 == 0 { 0 } else { 1 },
            mode: if system { 0 } else { 2 },
            cpu: if system { cpu } else { NCPU },
            flags,
            count: 2,
            class: 0,
        });
        if self.pmcs.len() == before {
            return;
        }
        let pmc = (self.pmcs.len() - 1) as u16;
        // Called by the owner (proc % 8 != 0 picks the owner).
        if !system {
            self.pmc_call(1, pmc, PmcCall::Attach { target });
        }
        self.pmc_call(1, pmc, PmcCall::Start);
    }

    fn pmc_call(&mut self, proc: u16, pmc: u16, what: PmcCall) {
        // A PMC, mostly called on by its owner; sometimes by another
        // process (EINVAL).
        let Some(&(owner, id)) = pick(&self.pmcs, pmc) else {
            return;
        };
        let by_owner = self.procs.iter().position(|q| q.alive && q.pid == owner);
        let p = match by_owner {
            Some(o) if proc % 8 != 0 => o,
            _ => match self.live(proc) {
                Some(p) => p,
                None => return,
            },
        };
        let simple = |run: &mut Run, op: PmcOp| {
            let mut s = PmcOpSimple { pm_pmcid: id };
            run.call(p, op, &mut s)
        };
        match what {
            PmcCall::Attach { target } | PmcCall::Detach { target } => {
                // Mostly a live process; sometimes any the run has seen:
                // exiting, a zombie, or a pid that may have been reused.
                let t = if target % 4 == 0 {
                    pick(&self.procs, target / 4).map(|q| q.pid)
                } else {
                    self.live(target).map(|t| self.procs[t].pid)
                };
                let pid = t.map_or(0, |pid| pid as i32);
                let mut a = PmcOpPmcattach {
                    pm_pmc: id,
                    pm_pid: pid,
                };
                let op = if matches!(what, PmcCall::Attach { .. }) {
                    PmcOp::Pmcattach
                } else {
                    PmcOp::Pmcdetach
                };
                let _ = self.call(p, op, &mut a);
            }
            PmcCall::Start => {
                let _ = simple(self, PmcOp::Pmcstart);
            }
            PmcCall::Stop => {
                let _ = simple(self, PmcOp::Pmcstop);
            }
            PmcCall::Release => {
                if simple(self, PmcOp::Pmcrelease).is_ok() {
                    self.pmcs.retain(|(_, x)| *x != id);
                }
            }
            PmcCall::Caps => {
                let mut c = PmcOpCaps {
                    pm_pmcid: id,
                    pm_caps: 0,
                };
                let _ = self.call(p, PmcOp::Getcaps, &mut c);
            }
            PmcCall::Notify {
                count,
                refresh,
                bytes,
                signo,
            } => {
                let req = PmcOpNotify {
                    pm_pmcid: id,
                    pm_flags: if bytes { PMC_NOTIFY_BYTES } else { 0 },
                    pm_count: count,
                    pm_refresh: refresh,
                    pm_signo: signo,
                    pm_fd: -1,
                    pm_spare: [0; 2],
                };
                let mut b = req.as_bytes().to_vec();
                if self.syscall(p, PMC_OP_EXT_NOTIFY, &mut b).is_ok() {
                    let fd = PmcOpNotify::read_from(&b).expect("sized").pm_fd;
                    let pid = self.procs[p].pid;
                    self.procs[p].fds.push(fd);
                    let file = self.m.file_of(pid, fd).expect("the new descriptor");
                    // A descendant may ask for the PMC of the owner it
                    // inherited (pmc_find_pmc): the descriptor is its, the
                    // PMC the owner's.
                    let owner = self
                        .driver()
                        .pmc_owner_for(pid, id)
                        .expect("the PMC the call found");
                    self.notified.push(Notified {
                        owner,
                        id,
                        file,
                        count: if bytes { 0 } else { count },
                        refresh,
                        last: PmcNotification::default(),
                    });
                }
            }
            PmcCall::GetMsr => {
                let mut g = PmcOpGetmsr {
                    pm_msr: 0,
                    pm_pmcid: id,
                };
                let _ = self.call(p, PmcOp::Pmcgetmsr, &mut g);
            }
            PmcCall::Read | PmcCall::Write { .. } => {
                let (flags, value) = match what {
                    PmcCall::Write { value } => (PmcFlags::NEWVALUE | PmcFlags::OLDVALUE, value),
                    _ => (PmcFlags::OLDVALUE, 0),
                };
                let mut rw = PmcOpPmcrw {
                    pm_pmcid: id,
                    pm_flags: flags.bits(),
                    pm_value: value,
                };
                let _ = self.call(p, PmcOp::Pmcrw, &mut rw);
            }
            PmcCall::SetCount { count } => {
                let mut b = vec![0u8; size_of::<PmcOpPmcsetcount>()];
                let c = offset_of!(PmcOpPmcsetcount, pm_count);
                b[c..c + 8].copy_from_slice(&count.to_ne_bytes());
                let i = offset_of!(PmcOpPmcsetcount, pm_pmcid);
                b[i..i + 4].copy_from_slice(&id.to_ne_bytes());
                let _ = self.syscall(p, PmcOp::Pmcsetcount.raw(), &mut b);
            }
        }
    }

    /// The invariants that hold between any two steps.
    fn check(&mut self) -> Result<(), String> {
        let v = self.m.violations();
        if !v.is_empty() {
            return Err(format!("witness: {v:?}"));
        }
        let mut views: Vec<PmcView> = Vec::new();
        let _e = self.m.enter();
        self.driver().for_each_pmc(|v| views.push(*v));
        // Soft events: each running system PMC, and each CPU a running
        // process PMC is on, has a row that holds the event or is stalled;
        // a stopped process PMC still on a CPU may (it stops at its
        // target's next switch-out, as on FreeBSD). Nothing else holds it.
        let mut need: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
        for v in views.iter().filter(|v| v.class == PmcClass::Soft) {
            let (must, may) = match (v.mode.is_system(), v.state) {
                (true, PmcState::Running) => (1, 1),
                (true, _) => (0, 0),
                (false, PmcState::Running) => (v.runcount as i64, v.runcount as i64),
                (false, _) => (0, v.runcount as i64),
            };
            let e = need.entry(v.event).or_default();
            e.0 += must;
            e.1 += may;
        }
        for e in self.m.soft_events() {
            let (must, may) = need.get(&e.code).copied().unwrap_or((0, 0));
            let (armed, stalled) = self.driver().rows_on_event(e.code);
            let rows = (armed + stalled) as i64;
            if e.running != armed as i32 || rows < must || rows > may {
                return Err(format!(
                    "soft event {}: armed {} times in the kernel, {armed} rows armed and {stalled} stalled, {must} to {may} needed: {views:?}",
                    e.name, e.running
                ));
            }
        }
        // A process whose exit handlers ran is nobody's target (unless
        // its pid went to a new process).
        for q in self.procs.iter().filter(|q| q.exiting) {
            let reused = self.procs.iter().any(|o| o.alive && o.pid == q.pid);
            if !reused && self.driver().is_target(q.pid) {
                return Err(format!("exited process {} is still a target", q.pid));
            }
        }
        // A target's thread has one descriptor at most.
        for q in self.procs.iter().filter(|q| q.alive) {
            for &tid in &q.threads {
                let n = self.driver().thread_descriptors(q.pid, tid);
                if n > 1 {
                    return Err(format!("thread {tid} of {} has {n} descriptors", q.pid));
                }
            }
        }
        // The masks the context-switch paths walk agree with the rows.
        for q in self.procs.iter() {
            if let Some(ri) = self.driver().attached_mask_mismatch(q.pid) {
                return Err(format!(
                    "target {}: row {ri} disagrees with its attached mask",
                    q.pid
                ));
            }
        }
        for cpu in 0..NCPU as u32 {
            if let Some(ri) = self.driver().loaded_mask_mismatch(cpu) {
                return Err(format!(
                    "CPU {cpu}: row {ri} disagrees with its loaded or occupied mask"
                ));
            }
        }
        // Running PMCs: within the CPUs, and system samplers counted.
        let mut ss: BTreeMap<u32, u32> = BTreeMap::new();
        for v in &views {
            if v.runcount > NCPU as u32 {
                return Err(format!("PMC {:#x} runs on {} CPUs", v.id, v.runcount));
            }
            if v.mode == PmcMode::Ss && v.state == PmcState::Running {
                *ss.entry(v.owner).or_default() += 1;
            }
        }
        for v in &views {
            let want = ss.get(&v.owner).copied().unwrap_or(0);
            if v.owner_sscount != want {
                return Err(format!(
                    "owner {} counts {} running system samplers, has {want}",
                    v.owner, v.owner_sscount
                ));
            }
        }
        let total: u32 = ss.values().sum();
        if self.driver().system_samplers() != total {
            return Err(format!(
                "the driver counts {} running system samplers, there are {total}",
                self.driver().system_samplers()
            ));
        }
        // The kernel's pmc_ss_count, which gates the *_LOG hooks, counts
        // the owners with a running system sampler, as the driver's list.
        let owners = ss.len();
        let kernel = self.m.pmc_ss_count();
        if kernel != owners as i32 || self.driver().ss_owner_count() != owners {
            return Err(format!(
                "pmc_ss_count {kernel}, {} owners on the driver's list, {owners} own a running system sampler",
                self.driver().ss_owner_count()
            ));
        }
        // The thread free list: its sysctl says its length.
        let entries = self.driver().thread_freelist_entries();
        if self.m.sysctl_get("kern.hwpmc.threadfreelist_entries") != Some(entries.into()) {
            return Err(format!(
                "kern.hwpmc.threadfreelist_entries {:?}, {entries} on the list",
                self.m.sysctl_get("kern.hwpmc.threadfreelist_entries")
            ));
        }
        self.check_notifications(&views)?;
        // Samples: taken = logged + not logged + still in a ring.
        let s = self.driver().sample_stats();
        let (taken, logged, unlogged) = (load(&s.taken), load(&s.logged), load(&s.unlogged));
        let pending = self.driver().samples_pending() as u64;
        if taken != logged + unlogged + pending {
            return Err(format!(
                "samples: {taken} taken, {logged} logged, {unlogged} unlogged, {pending} pending"
            ));
        }
        // Statistics only grow; failures never exceed attempts.
        let st = self.driver().stats();
        let now = [
            st.intr_ignored.fetch(),
            st.intr_processed.fetch(),
            st.intr_bufferfull.fetch(),
            st.syscalls.fetch(),
            st.syscall_errors.fetch(),
            st.buffer_requests.fetch(),
            st.buffer_requests_failed.fetch(),
            st.log_sweeps.fetch(),
        ];
        if now.iter().zip(&self.last_stats).any(|(n, l)| n < l) {
            return Err(format!(
                "statistics went down: {:?} -> {now:?}",
                self.last_stats
            ));
        }
        if now[4] > now[3] || now[6] > now[5] {
            return Err(format!("more failures than attempts: {now:?}"));
        }
        self.last_stats = now;
        Ok(())
    }

    /// The notification descriptors: their records never go back, never
    /// claim more notifications than samples allow nor more samples than a
    /// refresh count; a released PMC's descriptor is ended.
    fn check_notifications(&mut self, views: &[PmcView]) -> Result<(), String> {
        for n in &mut self.notified {
            let live = views.iter().any(|v| v.id == n.id && v.owner == n.owner);
            let (_, hup) = self
                .m
                .notify_poll_file(n.file)
                .expect("a notification file");
            while let Some(NotifyRead::Record(r)) = self.m.notify_read_file(n.file) {
                let rec = PmcNotification::read_from(&r).expect("a whole record");
                let last = &n.last;
                if rec.pn_pmcid != n.id
                    || rec.pn_notifications < last.pn_notifications
                    || rec.pn_samples < last.pn_samples
                    || (n.count > 0 && rec.pn_notifications > rec.pn_samples / u64::from(n.count))
                    || (n.refresh > 0 && rec.pn_samples > u64::from(n.refresh))
                    || last.pn_flags & PMC_NOTIFICATION_END != 0
                {
                    return Err(format!(
                        "PMC {:#x} (every {} samples, refresh {}): record {rec:?} after {last:?}",
                        n.id, n.count, n.refresh
                    ));
                }
                n.last = rec;
            }
            if !live && !hup {
                return Err(format!(
                    "PMC {:#x} is gone, its notification descriptor is not ended",
                    n.id
                ));
            }
        }
        Ok(())
    }

    /// A WRITELOG of `pid` succeeded: its log must hold `cookie`.
    fn user_record_logged(&mut self, pid: u32, cookie: u32) {
        if let Some(l) = self
            .logs
            .iter_mut()
            .rev()
            .find(|l| l.owner == pid && l.active)
        {
            l.cookies.push(cookie);
        }
    }

    fn finish_exit(&mut self, p: usize) {
        self.m.exit_finish(self.procs[p].pid);
        self.procs[p].zombie = true;
        self.procs[p].fds.clear();
    }

    /// Unloads the driver and checks the logs and what is left.
    fn finish(mut self) -> Result<(), String> {
        let _e = self.m.enter();
        for p in 0..self.procs.len() {
            if self.procs[p].exiting && !self.procs[p].zombie {
                self.finish_exit(p);
            }
        }
        if std::env::var_os("HWPMC_RANDOM_VERBOSE").is_some() {
            let st = self.driver().stats();
            let ss = self.driver().sample_stats();
            eprintln!(
                "syscalls {} (errors {}), interrupts {}, full {}, samples {} (logged {}), PMCs now {}, logs {}, log bytes {}, race hand-overs {}",
                st.syscalls.fetch(),
                st.syscall_errors.fetch(),
                st.intr_processed.fetch(),
                st.intr_bufferfull.fetch(),
                load(&ss.taken),
                load(&ss.logged),
                self.pmcs.len(),
                self.logs.len(),
                self.logs
                    .iter()
                    .map(|l| self.m.file_data(l.file).len())
                    .sum::<usize>(),
                self.switches
            );
        }
        let (_, t) = self.m.spawn(Cred::root(), "kldunload");
        self.room_for(t);
        let module = self.module.take().expect("loaded");
        let (taken, logged, unlogged) = self.m.in_thread(t, || module.unload_counted());
        if taken != logged + unlogged {
            return Err(format!(
                "at unload: {taken} samples taken, {logged} logged, {unlogged} not"
            ));
        }
        let v = self.m.violations();
        if !v.is_empty() {
            return Err(format!("witness at unload: {v:?}"));
        }
        if self.m.pmc_ss_count() != 0 {
            return Err(format!(
                "pmc_ss_count {} after unload",
                self.m.pmc_ss_count()
            ));
        }
        for e in self.m.soft_events() {
            if e.running != 0 {
                return Err(format!(
                    "soft event {} armed {} after unload",
                    e.name, e.running
                ));
            }
        }
        if self.m.kmem_live() != (0, 0) {
            return Err(format!("kernel memory left: {:?}", self.m.kmem_live()));
        }
        if !self.m.kprocs().is_empty() {
            return Err(format!("kernel processes left: {:?}", self.m.kprocs()));
        }
        // Every sample logged is in a log file, unless a file could fail.
        if !self.logs.iter().any(|l| l.may_fail) {
            let in_files: usize = self
                .logs
                .iter()
                .map(|l| {
                    records(&self.m.file_data(l.file))
                        .filter(|r| matches!(r, Ok(r) if matches!(r.body, PmclogBody::Callchain { .. })))
                        .count()
                })
                .sum();
            if in_files as u64 != logged {
                return Err(format!(
                    "{logged} samples logged, {in_files} call chains in the log files"
                ));
            }
        }
        for l in &self.logs {
            let data = self.m.file_data(l.file);
            let mut cookies = Vec::new();
            let mut closes = 0;
            let mut last_close = false;
            for r in records(&data) {
                match r {
                    Ok(r) => {
                        last_close = matches!(r.body, PmclogBody::Closelog);
                        match r.body {
                            PmclogBody::Closelog => closes += 1,
                            PmclogBody::Userdata { userdata } => cookies.push(userdata),
                            _ => {}
                        }
                    }
                    // A failing device cuts the log anywhere.
                    Err(_) if l.may_fail => break,
                    Err(e) => return Err(format!("log of {} does not parse: {e:?}", l.owner)),
                }
            }
            // Records of different CPUs sit in different buffers, so the
            // log holds them in buffer order, as FreeBSD's does: compare
            // them as sets.
            let mut want = l.cookies.clone();
            want.sort_unstable();
            cookies.sort_unstable();
            if l.may_fail {
                if cookies.iter().any(|c| want.binary_search(c).is_err()) {
                    return Err(format!(
                        "log of {}: user records {cookies:?} beyond the successful {want:?}",
                        l.owner
                    ));
                }
                continue;
            }
            if closes != 1 || !last_close {
                return Err(format!(
                    "log of {} has {closes} CLOSELOG records, last record CLOSELOG: {last_close}",
                    l.owner
                ));
            }
            if cookies != want {
                return Err(format!(
                    "log of {} holds user records {cookies:?}, WRITELOG succeeded for {want:?}",
                    l.owner
                ));
            }
        }
        Ok(())
    }
}

/// Runs `ops` on a fresh machine; the first broken invariant, if any.
pub fn run(ops: &[Op]) -> Result<(), Failure> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut r = Run::new();
        for _ in 0..3 {
            r.spawn(true);
        }
        r.spawn(false);
        for (i, op) in ops.iter().enumerate() {
            {
                let _e = r.m.enter();
                r.step(op);
            }
            r.check().map_err(|what| Failure { step: i + 1, what })?;
            if std::env::var_os("HWPMC_RANDOM_TRACE").is_some() {
                let _e = r.m.enter();
                let mut pmcs = Vec::new();
                r.driver().for_each_pmc(|v| {
                    pmcs.push((v.state, v.mode, v.event & 0xff, v.cpu as i32, v.runcount));
                });
                let on: Vec<_> = (0..NCPU as u32).map(|c| r.m.running_on(c)).collect();
                // Each soft event in use: the kernel's count of arming,
                // and the rows armed and stalled.
                let soft: Vec<_> =
                    r.m.soft_events()
                        .iter()
                        .map(|e| (e.code & 0xff, e.running, r.driver().rows_on_event(e.code)))
                        .filter(|&(_, running, rows)| running != 0 || rows != (0, 0))
                        .collect();
                eprintln!(
                    "{op:?} -> pmcs {pmcs:?} on-cpu {on:?} soft {soft:?} ({} owned)",
                    r.pmcs.len()
                );
            }
        }
        r.finish().map_err(|what| Failure {
            step: ops.len(),
            what,
        })
    }));
    match outcome {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic".into());
            Err(Failure {
                step: 0,
                what: format!("panic: {msg}"),
            })
        }
    }
}

/// A driver statistic's value.
fn load(a: &kpi::atomic::AtomicU64) -> u64 {
    a.load(kpi::atomic::Ordering::Relaxed)
}

/// The sequence of `len` steps of `seed`.
pub fn sequence(seed: u64, len: usize) -> Vec<Op> {
    let mut r = Rng::new(seed);
    (0..len).map(|_| Op::random(&mut r)).collect()
}

/// A shortest sequence found that still fails, by removing ever smaller
/// chunks of steps while the run keeps failing; gives up refining after
/// `budget` runs.
pub fn shrink(ops: &[Op], budget: usize) -> (Vec<Op>, Failure) {
    shrink_with(ops, budget, run)
}

/// [`shrink`] with the run given: `run` says how a sequence fails.
pub fn shrink_with<T: Clone>(
    ops: &[T],
    budget: usize,
    run: impl Fn(&[T]) -> Result<(), Failure>,
) -> (Vec<T>, Failure) {
    let mut best = ops.to_vec();
    let mut failure = run(&best).expect_err("shrink starts from a failing sequence");
    let mut runs = 0;
    let mut chunk = best.len().div_ceil(2).max(1);
    while chunk >= 1 && runs < budget {
        let mut i = 0;
        let mut removed = false;
        while i < best.len() && runs < budget {
            let mut cand = best.clone();
            cand.drain(i..(i + chunk).min(cand.len()));
            runs += 1;
            match run(&cand) {
                Err(f) => {
                    best = cand;
                    failure = f;
                    removed = true;
                }
                Ok(()) => i += chunk,
            }
        }
        if !removed {
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    (best, failure)
}

/// What a batch of runs did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    /// Sequences run.
    pub sequences: u64,
    /// Steps run.
    pub steps: u64,
}

/// Runs `sequences` sequences of `len` steps from seeds `first..`; stops
/// at the first failing one and returns its seed, shrunk sequence and
/// failure.
#[allow(clippy::type_complexity)]
pub fn batch(
    first: u64,
    sequences: u64,
    len: usize,
    mut keep_going: impl FnMut() -> bool,
) -> Result<Totals, (u64, Vec<Op>, Failure)> {
    let mut t = Totals::default();
    for seed in first..first + sequences {
        if !keep_going() {
            break;
        }
        let ops = sequence(seed, len);
        if run(&ops).is_err() {
            let (small, f) = shrink(&ops, 2000);
            return Err((seed, small, f));
        }
        t.sequences += 1;
        t.steps += len as u64;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_keeps_just_the_steps_that_matter() {
        // Fails when a 3 comes after a 7, anywhere in the sequence.
        let fails = |v: &[u32]| {
            let seven = v.iter().position(|&x| x == 7);
            match seven {
                Some(i) if v[i..].contains(&3) => Err(Failure {
                    step: v.len(),
                    what: "3 after 7".into(),
                }),
                _ => Ok(()),
            }
        };
        let long: Vec<u32> = (0..200).map(|i| [1, 7, 2, 9, 3, 5][i % 6]).collect();
        let (small, f) = shrink_with(&long, 10_000, fails);
        assert_eq!(small, vec![7, 3]);
        assert_eq!(f.what, "3 after 7");
    }

    #[test]
    fn the_same_seed_gives_the_same_sequence() {
        assert_eq!(sequence(42, 300), sequence(42, 300));
        assert_ne!(sequence(42, 300), sequence(43, 300));
    }
}

//! A simulated machine with hwt(4) loaded and a test backend registered,
//! and the ioctls wrapped the way a userland tool makes them.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use hwt::{BackendOps, BackendTag, BufId, BufPtr, HwtBackend, HwtContext, Module};
use kpi::KResult;
use kpi::cdev::PageObject;
use kpi::malloc::Wait;
use ksim::{Cred, DevFd, Machine, MachineConfig};
use uapi::hwt::*;

pub use kpi::errno::*;

/// What the test backend was asked, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Init {
        ident: i32,
    },
    Deinit {
        ident: i32,
    },
    Configure {
        cpu: u32,
        buf: BufId,
        curcpu: u32,
        config: Option<Vec<u8>>,
    },
    Enable {
        cpu: u32,
        curcpu: u32,
    },
    Disable {
        cpu: u32,
        curcpu: u32,
    },
    Read {
        buf: BufId,
    },
    Stop {
        ident: i32,
    },
    SvcBuf {
        data: Vec<u8>,
        version: i32,
    },
    EnableSmp,
    DisableSmp,
    ThreadAlloc {
        thread_id: i32,
    },
    ThreadFree {
        thread_id: i32,
    },
}

/// A backend that records its calls; `ops` says which optional ones it
/// has. Its `read` reports `next_read`.
pub struct TestBackend {
    pub ops: BackendOps,
    pub calls: Arc<Mutex<Vec<Call>>>,
    pub next_read: Arc<Mutex<KResult<BufPtr>>>,
    /// What `configure` answers.
    pub configure_result: Arc<Mutex<KResult<()>>>,
    /// What `init` answers.
    pub init_result: Arc<Mutex<KResult<()>>>,
}

impl TestBackend {
    fn log(&self, c: Call) {
        self.calls.lock().unwrap().push(c);
    }
}

impl HwtBackend for TestBackend {
    fn ops(&self) -> BackendOps {
        self.ops
    }
    fn init(&self, ctx: &HwtContext) -> KResult<()> {
        self.log(Call::Init { ident: ctx.ident() });
        *self.init_result.lock().unwrap()
    }
    fn deinit(&self, ctx: &HwtContext) {
        self.log(Call::Deinit { ident: ctx.ident() });
    }
    fn configure(&self, ctx: &HwtContext, cpu: u32, buf: BufId) -> KResult<()> {
        let config = ctx.with_config(|c| c.map(|(b, _)| b.to_vec()));
        self.log(Call::Configure {
            cpu,
            buf,
            curcpu: kpi::cpu::curcpu(),
            config,
        });
        *self.configure_result.lock().unwrap()
    }
    fn enable(&self, _ctx: &HwtContext, cpu: u32) {
        self.log(Call::Enable {
            cpu,
            curcpu: kpi::cpu::curcpu(),
        });
    }
    fn disable(&self, _ctx: &HwtContext, cpu: u32) {
        self.log(Call::Disable {
            cpu,
            curcpu: kpi::cpu::curcpu(),
        });
    }
    fn read(&self, _ctx: &HwtContext, buf: BufId) -> KResult<BufPtr> {
        self.log(Call::Read { buf });
        *self.next_read.lock().unwrap()
    }
    fn stop(&self, ctx: &HwtContext) -> KResult<()> {
        self.log(Call::Stop { ident: ctx.ident() });
        Ok(())
    }
    fn svc_buf(&self, _ctx: &HwtContext, data: &[u8], version: i32) -> KResult<()> {
        self.log(Call::SvcBuf {
            data: data.to_vec(),
            version,
        });
        Ok(())
    }
    fn enable_smp(&self, _ctx: &HwtContext) -> KResult<()> {
        self.log(Call::EnableSmp);
        Ok(())
    }
    fn disable_smp(&self, _ctx: &HwtContext) -> KResult<()> {
        self.log(Call::DisableSmp);
        Ok(())
    }
    fn thread_alloc(&self, _ctx: &HwtContext, thread_id: i32, _pages: &PageObject) -> KResult<()> {
        self.log(Call::ThreadAlloc { thread_id });
        Ok(())
    }
    fn thread_free(&self, _ctx: &HwtContext, thread_id: i32) {
        self.log(Call::ThreadFree { thread_id });
    }
}

/// A process of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct P {
    pub pid: u32,
    pub tid: u32,
}

pub struct Sim {
    pub m: Machine,
    pub module: Option<Module>,
    pub tag: Option<BackendTag>,
    pub calls: Arc<Mutex<Vec<Call>>>,
    pub next_read: Arc<Mutex<KResult<BufPtr>>>,
    pub configure_result: Arc<Mutex<KResult<()>>>,
    pub init_result: Arc<Mutex<KResult<()>>>,
    /// Kernel memory before the module loaded.
    pub kmem_before: (usize, usize),
    _enter: ksim::machine_guard::Entered,
}

impl Sim {
    /// Two CPUs, hwt loaded, the test backend registered as "test" with
    /// every optional operation.
    pub fn new() -> Sim {
        Sim::with(MachineConfig::default(), BackendOps::all())
    }

    pub fn with(cfg: MachineConfig, ops: BackendOps) -> Sim {
        let m = Machine::new(cfg);
        let enter = m.enter();
        let kmem_before = m.kmem_live();
        let (_, kld) = m.spawn(Cred::root(), "kldload");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let next_read = Arc::new(Mutex::new(Ok(BufPtr::default())));
        let configure_result = Arc::new(Mutex::new(Ok(())));
        let init_result = Arc::new(Mutex::new(Ok(())));
        let backend = TestBackend {
            ops,
            calls: calls.clone(),
            next_read: next_read.clone(),
            configure_result: configure_result.clone(),
            init_result: init_result.clone(),
        };
        let (module, tag) = m.in_thread(kld, || {
            let module = Module::load().expect("hwt loads");
            let ops = kpi::kbox_dyn!(backend, Wait::WaitOk, dyn HwtBackend).unwrap();
            let tag = module
                .register_backend("test", true, ops)
                .expect("registers");
            (module, tag)
        });
        Sim {
            m,
            module: Some(module),
            tag: Some(tag),
            calls,
            next_read,
            configure_result,
            init_result,
            kmem_before,
            _enter: enter,
        }
    }

    pub fn spawn(&self, cred: Cred, comm: &str) -> P {
        let (pid, tid) = self.m.spawn(cred, comm);
        P { pid, tid }
    }
    pub fn root(&self) -> P {
        self.spawn(Cred::root(), "tool")
    }

    /// The calls the backend saw since the last look.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }

    /// open(2) of a device for reading and writing.
    pub fn open(&self, p: P, path: &str) -> DevFd {
        self.m
            .dev_open(p.tid, path, true, true)
            .unwrap_or_else(|e| panic!("open {path}: errno {e}"))
    }

    /// ioctl(2) with `arg` copied to the caller's memory and back.
    pub fn ioctl_bytes(&self, p: P, fd: &DevFd, cmd: u32, arg: &mut [u8]) -> Result<(), Errno> {
        let uaddr = self.m.user_alloc(p.pid, arg.len().max(1));
        self.m.user_write(p.pid, uaddr, arg);
        let r = self.m.dev_ioctl(p.tid, fd, cmd, uaddr);
        arg.copy_from_slice(&self.m.user_read(p.pid, uaddr, arg.len()));
        r.map_err(|e| Errno::new(e).unwrap())
    }

    pub fn ioctl<T: uapi::AsBytes + uapi::Plain>(
        &self,
        p: P,
        fd: &DevFd,
        cmd: u32,
        arg: &T,
    ) -> Result<(), Errno> {
        let mut bytes = arg.as_bytes().to_vec();
        self.ioctl_bytes(p, fd, cmd, &mut bytes)
    }

    /// A string in `p`'s memory.
    pub fn user_str(&self, p: P, s: &str) -> u64 {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        let a = self.m.user_alloc(p.pid, b.len());
        self.m.user_write(p.pid, a, &b);
        a
    }

    /// An int in `p`'s memory.
    pub fn user_int(&self, p: P, v: i32) -> u64 {
        let a = self.m.user_alloc(p.pid, 4);
        self.m.user_write(p.pid, a, &v.to_ne_bytes());
        a
    }

    pub fn read_int(&self, p: P, a: u64) -> i32 {
        i32::from_ne_bytes(self.m.user_read(p.pid, a, 4).try_into().unwrap())
    }

    /// HWT_IOC_ALLOC by `p` on its descriptor of /dev/hwt.
    pub fn alloc_raw(&self, p: P, fd: &DevFd, a: &AllocArgs) -> Result<i32, Errno> {
        let ident = self.user_int(p, -1);
        let name = match a.backend {
            Some(n) => self.user_str(p, n),
            None => 0,
        };
        let cpu_map = if a.cpus.is_empty() && a.cpusetsize == 0 {
            0
        } else {
            let mut bytes = vec![0u8; a.cpusetsize];
            for &c in &a.cpus {
                bytes[c as usize / 8] |= 1 << (c % 8);
            }
            let addr = self.m.user_alloc(p.pid, bytes.len().max(1));
            self.m.user_write(p.pid, addr, &bytes);
            addr
        };
        let mut bytes = vec![0u8; 64];
        bytes[0..8].copy_from_slice(&(a.bufsize as u64).to_ne_bytes());
        bytes[8..12].copy_from_slice(&a.mode.to_ne_bytes());
        bytes[12..16].copy_from_slice(&a.pid.to_ne_bytes());
        bytes[16..24].copy_from_slice(&a.cpu_map_override.unwrap_or(cpu_map).to_ne_bytes());
        bytes[24..32].copy_from_slice(&(a.cpusetsize as u64).to_ne_bytes());
        bytes[32..40].copy_from_slice(&a.name_override.unwrap_or(name).to_ne_bytes());
        bytes[40..48].copy_from_slice(&a.ident_override.unwrap_or(ident).to_ne_bytes());
        bytes[48..52].copy_from_slice(&(-1i32).to_ne_bytes());
        self.ioctl_bytes(p, fd, HWT_IOC_ALLOC, &mut bytes)?;
        Ok(self.read_int(p, ident))
    }

    /// A thread-mode context of `owner` on `target` with 4-page buffers.
    pub fn alloc_thread(&self, owner: P, target: u32) -> (DevFd, i32) {
        let fd = self.open(owner, "/dev/hwt");
        let ident = self
            .alloc_raw(owner, &fd, &AllocArgs::thread(target))
            .expect("ALLOC");
        (fd, ident)
    }

    /// RECORD_GET of up to `n` records: (type, payload bytes) each.
    pub fn records(&self, p: P, fd: &DevFd, n: i32, wait: bool) -> Result<Vec<UserRecord>, Errno> {
        let buf = self.m.user_alloc(p.pid, 1056 * n.max(1) as usize);
        let count = self.user_int(p, n);
        let mut arg = vec![0u8; 32];
        arg[0..8].copy_from_slice(&buf.to_ne_bytes());
        arg[8..16].copy_from_slice(&count.to_ne_bytes());
        arg[16..20].copy_from_slice(&i32::from(wait).to_ne_bytes());
        self.ioctl_bytes(p, fd, HWT_IOC_RECORD_GET, &mut arg)?;
        let got = self.read_int(p, count);
        let bytes = self.m.user_read(p.pid, buf, 1056 * got as usize);
        Ok(bytes.chunks(1056).map(UserRecord::parse).collect())
    }

    /// SET_CONFIG with `config` (None: a null pointer and size 0).
    pub fn set_config(
        &self,
        p: P,
        fd: &DevFd,
        pause_on_mmap: bool,
        config: Option<&[u8]>,
        version: i32,
    ) -> Result<(), Errno> {
        let (addr, size) = match config {
            Some(c) => {
                let a = self.m.user_alloc(p.pid, c.len().max(1));
                self.m.user_write(p.pid, a, c);
                (a, c.len())
            }
            None => (0, 0),
        };
        self.set_config_raw(p, fd, pause_on_mmap, addr, size, version)
    }

    pub fn set_config_raw(
        &self,
        p: P,
        fd: &DevFd,
        pause_on_mmap: bool,
        addr: u64,
        size: usize,
        version: i32,
    ) -> Result<(), Errno> {
        let mut arg = vec![0u8; 32];
        arg[0..4].copy_from_slice(&i32::from(pause_on_mmap).to_ne_bytes());
        arg[8..16].copy_from_slice(&addr.to_ne_bytes());
        arg[16..24].copy_from_slice(&(size as u64).to_ne_bytes());
        arg[24..28].copy_from_slice(&version.to_ne_bytes());
        self.ioctl_bytes(p, fd, HWT_IOC_SET_CONFIG, &mut arg)
    }

    /// An ioctl whose argument is `struct hwt_start`-like (one int).
    pub fn simple(&self, p: P, fd: &DevFd, cmd: u32) -> Result<(), Errno> {
        let mut arg = vec![0u8; 16];
        self.ioctl_bytes(p, fd, cmd, &mut arg)
    }

    /// Kernel memory still held beyond what the machine had before hwt.
    pub fn leaked(&self) -> (usize, usize) {
        let now = self.m.kmem_live();
        (
            now.0.saturating_sub(self.kmem_before.0),
            now.1.saturating_sub(self.kmem_before.1),
        )
    }

    /// Unloads the backend and the framework; asserts nothing leaked and
    /// the witness saw no violation.
    pub fn unload_clean(mut self) {
        let (_, kld) = self.m.spawn(Cred::root(), "kldunload");
        let tag = self.tag.take();
        let module = self.module.take();
        self.m.in_thread(kld, || {
            drop(tag);
            drop(module);
        });
        self.assert_unloaded_clean();
    }

    /// After the unload: no device, no kernel memory left, and the
    /// witness saw no violation.
    pub fn assert_unloaded_clean(&self) {
        assert!(
            self.m.dev_names().iter().all(|n| !n.starts_with("hwt")),
            "devices left: {:?}",
            self.m.dev_names()
        );
        assert_eq!(self.leaked(), (0, 0), "kernel memory leaked");
        assert_eq!(self.m.violations(), vec![], "witness");
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if self.module.is_some() && !std::thread::panicking() {
            let (_, kld) = self.m.spawn(Cred::root(), "kldunload");
            let tag = self.tag.take();
            let module = self.module.take();
            self.m.in_thread(kld, || {
                drop(tag);
                drop(module);
            });
        }
    }
}

/// The ALLOC arguments.
#[derive(Debug, Clone)]
pub struct AllocArgs {
    pub bufsize: usize,
    pub mode: i32,
    pub pid: i32,
    pub backend: Option<&'static str>,
    pub cpus: Vec<u32>,
    pub cpusetsize: usize,
    pub name_override: Option<u64>,
    pub ident_override: Option<u64>,
    pub cpu_map_override: Option<u64>,
}

impl AllocArgs {
    pub fn thread(pid: u32) -> AllocArgs {
        AllocArgs {
            bufsize: 4 * 4096,
            mode: HWT_MODE_THREAD,
            pid: pid as i32,
            backend: Some("test"),
            cpus: Vec::new(),
            cpusetsize: 0,
            name_override: None,
            ident_override: None,
            cpu_map_override: None,
        }
    }
    pub fn cpu(cpus: &[u32]) -> AllocArgs {
        AllocArgs {
            mode: HWT_MODE_CPU,
            pid: 0,
            cpus: cpus.to_vec(),
            cpusetsize: 128,
            ..AllocArgs::thread(0)
        }
    }
}

/// A record as RECORD_GET returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    pub record_type: u32,
    pub path: String,
    pub addr: u64,
    pub baseaddr: u64,
    pub int0: i32,
    pub int1: i32,
    pub off: u64,
}

impl UserRecord {
    fn parse(b: &[u8]) -> UserRecord {
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
        let path = &b[8..1032];
        let end = path.iter().position(|&c| c == 0).unwrap_or(path.len());
        UserRecord {
            record_type: u32_at(0),
            path: String::from_utf8_lossy(&path[..end]).into_owned(),
            addr: u64_at(1032),
            baseaddr: u64_at(1040),
            int0: u32_at(8) as i32,
            int1: u32_at(12) as i32,
            off: u64_at(16),
        }
    }
}

/// The ioctls of a userland tool, for pieces of a race (which share the
/// machine, not the test's `Sim`).
#[derive(Clone)]
pub struct Io {
    pub m: Machine,
}

impl Io {
    pub fn ioctl_bytes(&self, p: P, fd: &DevFd, cmd: u32, arg: &mut [u8]) -> Result<(), Errno> {
        let uaddr = self.m.user_alloc(p.pid, arg.len().max(1));
        self.m.user_write(p.pid, uaddr, arg);
        let r = self.m.dev_ioctl(p.tid, fd, cmd, uaddr);
        arg.copy_from_slice(&self.m.user_read(p.pid, uaddr, arg.len()));
        r.map_err(|e| Errno::new(e).unwrap())
    }

    pub fn simple(&self, p: P, fd: &DevFd, cmd: u32) -> Result<(), Errno> {
        let mut arg = vec![0u8; 16];
        self.ioctl_bytes(p, fd, cmd, &mut arg)
    }

    /// RECORD_GET of up to `n` records.
    pub fn records(&self, p: P, fd: &DevFd, n: i32, wait: bool) -> Result<Vec<UserRecord>, Errno> {
        let buf = self.m.user_alloc(p.pid, 1056 * n.max(1) as usize);
        let count = self.m.user_alloc(p.pid, 4);
        self.m.user_write(p.pid, count, &n.to_ne_bytes());
        let mut arg = vec![0u8; 32];
        arg[0..8].copy_from_slice(&buf.to_ne_bytes());
        arg[8..16].copy_from_slice(&count.to_ne_bytes());
        arg[16..20].copy_from_slice(&i32::from(wait).to_ne_bytes());
        self.ioctl_bytes(p, fd, HWT_IOC_RECORD_GET, &mut arg)?;
        let got = i32::from_ne_bytes(self.m.user_read(p.pid, count, 4).try_into().unwrap());
        let bytes = self.m.user_read(p.pid, buf, 1056 * got as usize);
        Ok(bytes.chunks(1056).map(UserRecord::parse).collect())
    }

    /// Reads records, waiting, until one of `record_type` comes.
    pub fn wait_for(&self, p: P, fd: &DevFd, record_type: u32) -> UserRecord {
        loop {
            let recs = self.records(p, fd, 8, true).expect("RECORD_GET");
            if let Some(r) = recs.into_iter().find(|r| r.record_type == record_type) {
                return r;
            }
        }
    }
}

impl Sim {
    pub fn io(&self) -> Io {
        Io { m: self.m.clone() }
    }
}

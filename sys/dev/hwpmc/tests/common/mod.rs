//! A simulated machine with hwpmc loaded, and the system call wrapped the
//! way libpmc wraps it.
#![allow(dead_code)]

pub mod x86;

use core::mem::{offset_of, size_of};

use hwpmc::Module;
use ksim::{Cred, Machine, MachineConfig};
use uapi::pmc::*;
use uapi::{AsBytes, Plain};

pub use kpi::Errno;
#[allow(unused_imports)]
pub use kpi::errno::*;

/// A process of the simulated machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct P {
    pub pid: u32,
    pub tid: u32,
}

pub struct Sim {
    pub m: Machine,
    module: Option<Module>,
    pub sysnum: u32,
    _enter: ksim::machine_guard::Entered,
}

impl Sim {
    pub fn new() -> Sim {
        Sim::with(MachineConfig::default(), &[])
    }

    /// A machine built from `cfg` with kernel environment `kenv`, and
    /// hwpmc loaded.
    pub fn with(cfg: MachineConfig, kenv: &[(&str, &str)]) -> Sim {
        Sim::with_md(cfg, kenv, hwpmc::MachineDep::detect)
    }

    /// As [`Sim::with`], with the machine-dependent classes built by `md`.
    pub fn with_md(
        cfg: MachineConfig,
        kenv: &[(&str, &str)],
        md: fn(u32) -> kpi::KResult<hwpmc::MachineDep>,
    ) -> Sim {
        let m = Machine::new(cfg);
        let enter = m.enter();
        for (k, v) in kenv {
            m.kenv_set(k, v);
        }
        let (_, kld) = m.spawn(Cred::root(), "kldload");
        let module = m
            .in_thread(kld, || Module::load_with(md))
            .expect("hwpmc loads");
        let sysnum = module.syscall_number();
        Sim {
            m,
            module: Some(module),
            sysnum,
            _enter: enter,
        }
    }

    pub fn module(&self) -> &Module {
        self.module.as_ref().expect("loaded")
    }

    pub fn root(&self) -> P {
        self.spawn(Cred::root(), "root")
    }

    pub fn user(&self, uid: u32) -> P {
        self.spawn(Cred::user(uid), "user")
    }

    pub fn spawn(&self, cred: Cred, comm: &str) -> P {
        let (pid, tid) = self.m.spawn(cred, comm);
        P { pid, tid }
    }

    pub fn fork(&self, parent: P) -> P {
        let (pid, tid) = self.m.fork(parent.pid);
        P { pid, tid }
    }

    /// The raw system call with `bytes` as the argument block in the
    /// caller's memory; `bytes` is updated with what the kernel wrote.
    pub fn call_bytes(&self, p: P, op: u32, bytes: &mut [u8]) -> Result<(), Errno> {
        let uaddr = self.m.user_alloc(p.pid, bytes.len().max(1));
        self.m.user_write(p.pid, uaddr, bytes);
        let r = self.m.syscall(p.tid, self.sysnum, &[op as u64, uaddr]);
        let back = self.m.user_read(p.pid, uaddr, bytes.len());
        bytes.copy_from_slice(&back);
        r.map(|_| ())
            .map_err(|e| Errno::new(e).expect("a failed system call has a non-zero errno"))
    }

    /// The system call with an unmapped argument pointer.
    pub fn call_bad_pointer(&self, p: P, op: PmcOp) -> Result<(), Errno> {
        self.m
            .syscall(p.tid, self.sysnum, &[op.raw() as u64, 0xdead_0000])
            .map(|_| ())
            .map_err(|e| Errno::new(e).expect("a failed system call has a non-zero errno"))
    }

    pub fn call<T: AsBytes>(&self, p: P, op: PmcOp, arg: &mut T) -> Result<(), Errno> {
        let mut bytes = arg.as_bytes().to_vec();
        let r = self.call_bytes(p, op.raw(), &mut bytes);
        *arg = T::read_from(&bytes).unwrap();
        r
    }

    pub fn allocate_raw(&self, p: P, a: &PmcOpPmcallocate) -> Result<PmcId, Errno> {
        let mut b = vec![0u8; size_of::<PmcOpPmcallocate>()];
        let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
        put(
            offset_of!(PmcOpPmcallocate, pm_caps),
            &a.pm_caps.to_ne_bytes(),
        );
        put(
            offset_of!(PmcOpPmcallocate, pm_cpu),
            &a.pm_cpu.to_ne_bytes(),
        );
        put(
            offset_of!(PmcOpPmcallocate, pm_class),
            &a.pm_class.to_ne_bytes(),
        );
        put(offset_of!(PmcOpPmcallocate, pm_ev), &a.pm_ev.to_ne_bytes());
        put(
            offset_of!(PmcOpPmcallocate, pm_flags),
            &a.pm_flags.to_ne_bytes(),
        );
        put(
            offset_of!(PmcOpPmcallocate, pm_mode),
            &a.pm_mode.to_ne_bytes(),
        );
        put(
            offset_of!(PmcOpPmcallocate, pm_count),
            &a.pm_count.to_ne_bytes(),
        );
        #[cfg(target_arch = "x86_64")]
        {
            // The first 16 bytes of pm_md: IAP's config and off-core
            // response, AMD's config and sub-class.
            let md = a.pm_md.iap();
            let at = offset_of!(PmcOpPmcallocate, pm_md);
            put(at, &md.pm_iap_config.to_ne_bytes());
            put(at + 8, &md.pm_iap_rsp.to_ne_bytes());
        }
        self.call_bytes(p, PmcOp::Pmcallocate.raw(), &mut b)?;
        let off = offset_of!(PmcOpPmcallocate, pm_pmcid);
        Ok(u32::from_ne_bytes(b[off..off + 4].try_into().unwrap()))
    }

    /// Allocates a PMC: `cpu` is ignored (PMC_CPU_ANY) for process modes.
    pub fn allocate(
        &self,
        p: P,
        class: PmcClass,
        ev: u32,
        mode: PmcMode,
        cpu: u32,
        flags: PmcFlags,
    ) -> Result<PmcId, Errno> {
        let mut a = PmcOpPmcallocate::zeroed();
        a.pm_class = class.raw();
        a.pm_ev = ev;
        a.pm_mode = mode.raw();
        a.pm_cpu = if mode.is_virtual() { PMC_CPU_ANY } else { cpu };
        a.pm_flags = flags.bits();
        a.pm_caps = (PmcCaps::READ | PmcCaps::WRITE).bits();
        if class == PmcClass::Tsc {
            a.pm_caps = PmcCaps::READ.bits();
        }
        a.pm_count = if mode.is_sampling() { 65536 } else { 0 };
        self.allocate_raw(p, &a)
    }

    /// A SOFT counting PMC on CLOCK.HARD.
    pub fn soft_tc(&self, p: P) -> PmcId {
        self.allocate(
            p,
            PmcClass::Soft,
            self.soft("CLOCK.HARD"),
            PmcMode::Tc,
            0,
            PmcFlags::empty(),
        )
        .unwrap()
    }

    pub fn soft(&self, name: &str) -> u32 {
        self.m
            .soft_events()
            .iter()
            .find(|e| e.name == name)
            .unwrap()
            .code
    }

    pub fn simple(&self, p: P, op: PmcOp, id: PmcId) -> Result<(), Errno> {
        self.call(p, op, &mut PmcOpSimple { pm_pmcid: id })
    }
    pub fn start(&self, p: P, id: PmcId) -> Result<(), Errno> {
        self.simple(p, PmcOp::Pmcstart, id)
    }
    pub fn stop(&self, p: P, id: PmcId) -> Result<(), Errno> {
        self.simple(p, PmcOp::Pmcstop, id)
    }
    pub fn release(&self, p: P, id: PmcId) -> Result<(), Errno> {
        self.simple(p, PmcOp::Pmcrelease, id)
    }
    pub fn attach(&self, p: P, id: PmcId, pid: i32) -> Result<(), Errno> {
        self.call(
            p,
            PmcOp::Pmcattach,
            &mut PmcOpPmcattach {
                pm_pmc: id,
                pm_pid: pid,
            },
        )
    }
    pub fn detach(&self, p: P, id: PmcId, pid: i32) -> Result<(), Errno> {
        self.call(
            p,
            PmcOp::Pmcdetach,
            &mut PmcOpPmcattach {
                pm_pmc: id,
                pm_pid: pid,
            },
        )
    }
    pub fn rw(&self, p: P, id: PmcId, flags: PmcFlags, value: u64) -> Result<u64, Errno> {
        let mut a = PmcOpPmcrw {
            pm_flags: flags.bits(),
            pm_pmcid: id,
            pm_value: value,
        };
        self.call(p, PmcOp::Pmcrw, &mut a)?;
        Ok(a.pm_value)
    }
    pub fn read(&self, p: P, id: PmcId) -> Result<u64, Errno> {
        self.rw(p, id, PmcFlags::OLDVALUE, 0)
    }
    pub fn write(&self, p: P, id: PmcId, v: u64) -> Result<(), Errno> {
        self.rw(p, id, PmcFlags::NEWVALUE, v).map(|_| ())
    }
    pub fn setcount(&self, p: P, id: PmcId, count: u64) -> Result<(), Errno> {
        let mut b = vec![0u8; size_of::<PmcOpPmcsetcount>()];
        b[0..8].copy_from_slice(&count.to_ne_bytes());
        b[8..12].copy_from_slice(&id.to_ne_bytes());
        self.call_bytes(p, PmcOp::Pmcsetcount.raw(), &mut b)
    }
    pub fn getmsr(&self, p: P, id: PmcId) -> Result<u32, Errno> {
        let mut a = PmcOpGetmsr {
            pm_msr: 0,
            pm_pmcid: id,
        };
        self.call(p, PmcOp::Pmcgetmsr, &mut a)?;
        Ok(a.pm_msr)
    }
    pub fn getcaps(&self, p: P, id: PmcId) -> Result<PmcCaps, Errno> {
        let mut a = PmcOpCaps {
            pm_pmcid: id,
            pm_caps: 0,
        };
        self.call(p, PmcOp::Getcaps, &mut a)?;
        Ok(PmcCaps::from_bits_retain(a.pm_caps))
    }
    pub fn admin(&self, p: P, cpu: i32, ri: i32, state: PmcState) -> Result<(), Errno> {
        self.call(
            p,
            PmcOp::Pmcadmin,
            &mut PmcOpPmcadmin {
                pm_cpu: cpu,
                pm_flags: 0,
                pm_pmc: ri,
                pm_state: state.raw(),
            },
        )
    }
    pub fn cpuinfo(&self, p: P) -> PmcOpGetcpuinfo {
        let mut c = PmcOpGetcpuinfo::zeroed();
        self.call(p, PmcOp::Getcpuinfo, &mut c).unwrap();
        c
    }
    pub fn pmcinfo(&self, p: P, cpu: i32) -> Result<Vec<PmcInfo>, Errno> {
        let npmc = self.cpuinfo(p).pm_npmc as usize;
        let head = offset_of!(PmcOpGetpmcinfo, pm_pmcs);
        let mut b = vec![0u8; head + npmc * size_of::<PmcInfo>()];
        b[0..4].copy_from_slice(&cpu.to_ne_bytes());
        self.call_bytes(p, PmcOp::Getpmcinfo.raw(), &mut b)?;
        Ok((0..npmc)
            .map(|i| PmcInfo::read_from(&b[head + i * size_of::<PmcInfo>()..]).unwrap())
            .collect())
    }
    pub fn stats(&self, p: P) -> PmcOpGetdriverstats {
        let mut s = PmcOpGetdriverstats::default();
        self.call(p, PmcOp::Getdriverstats, &mut s).unwrap();
        s
    }
    pub fn module_version(&self, p: P, client: u32) -> Result<u32, Errno> {
        let mut v = client;
        self.call(p, PmcOp::Getmoduleversion, &mut v)?;
        Ok(v)
    }
    pub fn configurelog(&self, p: P, fd: i32, flags: i32) -> Result<(), Errno> {
        self.call(
            p,
            PmcOp::Configurelog,
            &mut PmcOpConfigurelog {
                pm_flags: flags,
                pm_logfd: fd,
            },
        )
    }

    /// Opens a file of `kind` in `p`.
    pub fn open(&self, p: P, kind: ksim::FileKind, writable: bool) -> i32 {
        self.m.open(p.pid, kind, writable)
    }

    /// Everything written to the file behind `fd` of `p`.
    pub fn file(&self, p: P, fd: i32) -> Vec<u8> {
        self.m
            .file_data(self.m.file_of(p.pid, fd).expect("open descriptor"))
    }

    pub fn writelog(&self, p: P, cookie: u32) -> Result<(), Errno> {
        self.call(
            p,
            PmcOp::Writelog,
            &mut PmcOpWritelog {
                pm_userdata: cookie,
            },
        )
    }
    pub fn flushlog(&self, p: P) -> Result<(), Errno> {
        self.call(p, PmcOp::Flushlog, &mut 0u32)
    }
    pub fn closelog(&self, p: P) -> Result<(), Errno> {
        self.call(p, PmcOp::Closelog, &mut 0u32)
    }

    /// Runs the process's thread on `cpu` for `ticks` clock ticks.
    pub fn run(&self, p: P, cpu: u32, ticks: u32) {
        self.m.run(p.tid, cpu, ticks);
    }

    pub fn signals_to(&self, pid: u32) -> Vec<i32> {
        self.m
            .signals()
            .iter()
            .filter(|s| s.0 == pid)
            .map(|s| s.1)
            .collect()
    }

    /// Unloads the driver and checks the machine: no witness violation, no
    /// kernel memory left.
    pub fn finish(mut self) {
        if let Some(module) = self.module.take() {
            let (_, kld) = self.m.spawn(Cred::root(), "kldunload");
            self.m.in_thread(kld, || module.unload());
        }
        assert_eq!(self.m.violations(), vec![], "witness violations");
        assert_eq!(self.m.kmem_live(), (0, 0), "kernel memory leaked at unload");
    }
}

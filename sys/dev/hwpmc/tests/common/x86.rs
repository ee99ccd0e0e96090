//! The x86 hardware classes' test helpers: machines of a CPU model,
//! allocation requests of pmu-events encodings, and real programs run with
//! the CPU's own counts beside them.

use std::sync::{Arc, Mutex};

use ksim::cpu::cost::CostModel;
use ksim::cpu::events::Counts;
use ksim::user_process::{UserProcess, UserThread};
use ksim::{Cred, MachineConfig};
use uapi::Plain;
use uapi::pmc::*;

use super::*;

pub const SKYLAKE_X: &str = "GenuineIntel-6-55-4";
pub const SKYLAKE: &str = "GenuineIntel-6-5E-3";
pub const ICELAKE_X: &str = "GenuineIntel-6-6A-6";
pub const ZEN2: &str = "AuthenticAMD-23-31-0";

/// PERFEVTSEL bits.
pub const USR: u64 = 1 << 16;
pub const OS: u64 = 1 << 17;
pub const INT: u64 = 1 << 20;

pub fn sim(cpuid: &str) -> Sim {
    Sim::with_md(
        MachineConfig {
            cpuid: cpuid.into(),
            ..MachineConfig::default()
        },
        &[],
        hwpmc::MachineDep::initialize,
    )
}

/// An allocation request of a pmu-events encoding.
pub fn request(
    class: PmcClass,
    mode: PmcMode,
    config: u64,
    caps: PmcCaps,
    count: u64,
) -> PmcOpPmcallocate {
    let mut a = PmcOpPmcallocate::zeroed();
    a.pm_class = class.raw();
    a.pm_mode = mode.raw();
    a.pm_cpu = PMC_CPU_ANY;
    a.pm_flags = PmcFlags::EV_PMU.bits();
    a.pm_caps = (caps | PmcCaps::READ | PmcCaps::WRITE).bits();
    a.pm_count = count;
    a.pm_md = uapi::pmc_mdep::x86::PmcMdOpPmcallocate {
        pm_iap: uapi::pmc_mdep::x86::PmcMdIapOpPmcallocate {
            pm_iap_config: config,
            pm_iap_rsp: 0,
        },
    };
    a
}

pub fn amd_request(mode: PmcMode, config: u64, caps: PmcCaps, count: u64) -> PmcOpPmcallocate {
    let mut a = request(PmcClass::K8, mode, 0, caps, count);
    a.pm_md = uapi::pmc_mdep::x86::PmcMdOpPmcallocate {
        pm_amd: uapi::pmc_mdep::x86::PmcMdAmdOpPmcallocate {
            pm_amd_config: config,
            pm_amd_sub_class: 0,
        },
    };
    a
}

pub fn allocate(s: &Sim, p: P, a: PmcOpPmcallocate) -> Result<PmcId, Errno> {
    s.allocate_raw(p, &a)
}

/// A counting PMC of `config` in user mode (`usr`), allocated by `owner`.
pub fn user_counter(s: &Sim, owner: P, class: PmcClass, config: u64, what: &str) -> PmcId {
    allocate(
        s,
        owner,
        request(class, PmcMode::Tc, config | USR, PmcCaps::USER, 0),
    )
    .unwrap_or_else(|e| panic!("{what}: {e:?}"))
}

/// Attaches `ids` to process `pid` and starts them.
pub fn follow(s: &Sim, owner: P, ids: &[PmcId], pid: u32) {
    for &id in ids {
        s.attach(owner, id, pid as i32).expect("attach");
        s.start(owner, id).expect("start");
    }
}

/// What the CPU itself saw of a program: its retired instructions, and
/// the cost model's cycles over them.
pub struct Observed {
    pub counts: Arc<Mutex<Counts>>,
    pub cost: Arc<Mutex<CostModel>>,
}

/// Execs workload `name` in a new process, with the CPU's own counts
/// subscribed; returns the process and its thread.
pub fn exec(s: &Sim, name: &str, argv: &[&str]) -> (P, Observed) {
    let image =
        ksim::programs::image(ksim::cpu::Arch::X86_64, name).expect("the ksim build made it");
    let p = s.spawn(Cred::root(), name);
    let path = format!("/usr/bin/{name}");
    let mut process = UserProcess::exec(&image, &path, argv, &[], p.pid as i32, 0).expect("exec");
    let counts = Arc::new(Mutex::new(Counts::default()));
    let cost = Arc::new(Mutex::new(CostModel::default()));
    process
        .cpu()
        .subscribe(Box::new(counts.clone()))
        .expect("subscribe");
    process
        .cpu()
        .subscribe(Box::new(cost.clone()))
        .expect("subscribe");
    let per_tick = MachineConfig::default().insns_per_tick;
    s.m.exec_user_thread(p.pid, &path, &image, UserThread::new(process, per_tick));
    (p, Observed { counts, cost })
}

/// Runs `p` on `cpu` until it exits.
pub fn run_to_exit(s: &Sim, p: P, cpu: u32) {
    for _ in 0..100_000 {
        if s.m.proc_info(p.pid).is_none_or(|i| i.zombie) {
            return;
        }
        s.run(p, cpu, 10);
    }
    panic!("{} did not exit", p.pid);
}

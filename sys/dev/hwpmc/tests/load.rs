//! Module load: the kernel checks, the tunables and their diagnostics,
//! the banner and the sysctls.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use hwpmc::Module;
use ksim::{Cred, Machine, MachineConfig};

fn load(cfg: MachineConfig, kenv: &[(&str, &str)]) -> (Machine, Result<Module, Errno>) {
    let m = Machine::new(cfg);
    let e = m.enter();
    for (k, v) in kenv {
        m.kenv_set(k, v);
    }
    let (_, t) = m.spawn(Cred::root(), "kldload");
    let r = m.in_thread(t, Module::load);
    drop(e);
    (m, r)
}

fn unload(m: &Machine, module: Module) {
    let _e = m.enter();
    let (_, t) = m.spawn(Cred::root(), "kldunload");
    m.in_thread(t, || module.unload());
    assert_eq!(m.kmem_live(), (0, 0));
    assert_eq!(m.violations(), vec![]);
}

#[test]
fn a_kernel_without_hwpmc_hooks_is_refused() {
    let (m, r) = load(
        MachineConfig {
            hwpmc_hooks: false,
            ..MachineConfig::default()
        },
        &[],
    );
    assert_eq!(r.err(), Some(EPROGMISMATCH));
    assert_eq!(
        m.console(),
        ["hwpmc: this kernel has not been compiled with 'options HWPMC_HOOKS'."]
    );
    assert!(m.syscalls().is_empty());
}

#[test]
fn a_kernel_of_another_pmc_version_is_refused() {
    let (m, r) = load(
        MachineConfig {
            kernel_pmc_version: 0x0A00_0000,
            ..MachineConfig::default()
        },
        &[],
    );
    assert_eq!(r.err(), Some(EPROGMISMATCH));
    assert_eq!(
        m.console(),
        ["hwpmc: kernel version (0xa000000) does not match module version (0xa030000)."]
    );
}

/// FreeBSD's rule (hwpmc_mod.c's load check): the kernel's
/// `pmc_kernel_version` must equal `PMC_VERSION` of the tree the module is
/// built in, so a module built in a 15.0 tree (0x0A000000) loads on 15.0's
/// kernel and one built in main's on main's.  The driver takes that
/// version from kpi (on FreeBSD, the glue compiled against the tree's
/// `sys/pmc.h`), not from the newest ABI it knows: on the simulator the
/// tree is this one, and every other version is refused.
#[test]
fn the_kernel_must_have_the_version_of_the_tree_the_module_is_built_in() {
    let built = kpi::kern_pmc::pmc_module_version();
    assert_eq!(
        built,
        uapi::pmc::PMC_VERSION,
        "the simulator's tree is this one"
    );
    let (m, r) = load(
        MachineConfig {
            kernel_pmc_version: built,
            ..MachineConfig::default()
        },
        &[],
    );
    unload(&m, r.unwrap());
    // 15.0's, an older and a newer minor, another major, another patch.
    for kernel in [
        0x0A00_0000,
        0x0A02_0000,
        0x0A04_0000,
        0x0B03_0000,
        0x0A03_0001,
    ] {
        let (m, r) = load(
            MachineConfig {
                kernel_pmc_version: kernel,
                ..MachineConfig::default()
            },
            &[],
        );
        assert_eq!(r.err(), Some(EPROGMISMATCH), "kernel 0x{kernel:x}");
        assert_eq!(
            m.console(),
            [format!(
                "hwpmc: kernel version (0x{kernel:x}) does not match module version (0x{built:x})."
            )]
        );
        assert_eq!(m.kmem_live(), (0, 0));
    }
}

/// Built in a 15.0 tree, the driver loads on 15.0's kernel, reports 15.0's
/// version, and refuses clients newer than itself, as FreeBSD's does: so
/// libpmc built in the same tree must ask for 15.0's version (libpmc's
/// build script takes it from the tree's `sys/pmc.h`).
#[test]
fn a_driver_built_in_a_15_0_tree_serves_15_0_clients_only() {
    let fifteen = MachineConfig {
        kernel_pmc_version: 0x0A00_0000,
        module_pmc_version: 0x0A00_0000,
        ..MachineConfig::default()
    };
    let s = common::Sim::with(fifteen, &[]);
    let p = s.root();
    assert_eq!(s.module_version(p, 0x0A00_0000), Ok(0x0A00_0000));
    assert_eq!(s.module_version(p, 0x0900_0000), Ok(0x0A00_0000));
    assert_eq!(s.module_version(p, 0x0A03_0000), Err(EPROGMISMATCH));
    // PMC_OP_GETCAPS is newer than 15.0: its driver does not know it.
    let id = s.soft_tc(p);
    assert_eq!(s.getcaps(p, id).err(), Some(EINVAL));
    s.release(p, id).unwrap();
    s.finish();
}

#[test]
fn the_banner_announces_each_class() {
    let (m, r) = load(MachineConfig::default(), &[]);
    let module = r.unwrap();
    assert_eq!(
        m.console(),
        // The default machine is a Skylake-SP: FreeBSD's capabilities of
        // IAP (IAP_PMC_CAPS) and IAF (IAF_PMC_CAPS), counts and widths
        // from its CPUID leaf 0xA.
        [
            "hwpmc: SOFT/16/64/0x67<INT,USR,SYS,REA,WRI> TSC/1/64/0x20<REA> \
          IAP/4/48/0x3ff<INT,USR,SYS,EDG,THR,REA,WRI,INV,QUA,PRC> IAF/3/48/0x67<INT,USR,SYS,REA,WRI>"
        ]
    );
    unload(&m, module);
}

#[test]
fn defaults_are_freebsds_current_values_and_are_published() {
    let (m, r) = load(MachineConfig::default(), &[]);
    let module = r.unwrap();
    let t = module.driver().tunables();
    assert_eq!(
        (
            t.hashsize,
            t.nsamples,
            t.callchaindepth,
            t.mtxpoolsize,
            t.logbuffersize,
            t.nbuffers_pcpu
        ),
        (1024, 256, 128, 2048, 256, 32)
    );
    assert_eq!(m.sysctl_get("kern.hwpmc.hashsize"), Some(1024));
    assert_eq!(m.sysctl_get("kern.hwpmc.mincount"), Some(1000));
    assert_eq!(m.sysctl_get("kern.hwpmc.callchaindepth"), Some(128));
    unload(&m, module);
    assert_eq!(
        m.sysctl_get("kern.hwpmc.hashsize"),
        None,
        "sysctls go with the module"
    );
}

#[test]
fn bad_tunables_are_reported_and_reset() {
    // (environment, diagnostic, (sysctl, value it is reset to)).
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, (&'a str, i64));
    let cases: &[Case<'_>] = &[
        (
            &[("kern.hwpmc.hashsize", "-3")],
            "hwpmc: tunable hashsize=-3 must be greater than zero.",
            ("kern.hwpmc.hashsize", 1024),
        ),
        (
            &[("kern.hwpmc.nsamples", "70000")],
            "hwpmc: tunable nsamples=70000 out of range.",
            ("kern.hwpmc.nsamples", 256),
        ),
        (
            &[("kern.hwpmc.nsamples", "0")],
            "hwpmc: tunable nsamples=0 out of range.",
            ("kern.hwpmc.nsamples", 256),
        ),
        (
            &[("kern.hwpmc.logbuffersize", "0")],
            "hwpmc: logbuffersize=0 must be greater than zero and less than or equal to 16384, resetting to 256.",
            ("kern.hwpmc.logbuffersize", 256),
        ),
        (
            &[("kern.hwpmc.logbuffersize", "16385")],
            "hwpmc: logbuffersize=16385 must be greater than zero and less than or equal to 16384, resetting to 256.",
            ("kern.hwpmc.logbuffersize", 256),
        ),
        (
            &[("kern.hwpmc.nbuffers_pcpu", "-1")],
            "hwpmc: nbuffers_pcpu=-1 must be greater than zero, resetting to 32.",
            ("kern.hwpmc.nbuffers_pcpu", 32),
        ),
        (
            &[
                ("kern.hwpmc.nbuffers_pcpu", "64"),
                ("kern.hwpmc.logbuffersize", "1024"),
            ],
            "hwpmc: nbuffers_pcpu=64 * logbuffersize=1024 exceeds 32MB per CPU limit, resetting to defaults (32 * 256).",
            ("kern.hwpmc.logbuffersize", 256),
        ),
        (
            &[("kern.hwpmc.callchaindepth", "600")],
            "hwpmc: tunable callchaindepth=600 out of range - using 512.",
            ("kern.hwpmc.callchaindepth", 512),
        ),
    ];
    for (kenv, message, (name, value)) in cases {
        let (m, r) = load(MachineConfig::default(), kenv);
        let module = r.unwrap();
        let console = m.console();
        assert_eq!(
            console.first().map(String::as_str),
            Some(*message),
            "{kenv:?}"
        );
        assert_eq!(
            console.len(),
            2,
            "one diagnostic and the banner: {console:?}"
        );
        assert_eq!(m.sysctl_get(name), Some(*value), "{kenv:?}");
        let t = module.driver().tunables();
        assert!(t.nbuffers_pcpu * t.logbuffersize <= 32 * 1024);
        unload(&m, module);
    }
}

#[test]
fn good_tunables_are_taken() {
    let (m, r) = load(
        MachineConfig::default(),
        &[
            ("kern.hwpmc.hashsize", "64"),
            ("kern.hwpmc.nsamples", "1024"),
            ("kern.hwpmc.callchaindepth", "32"),
        ],
    );
    let module = r.unwrap();
    let t = module.driver().tunables();
    assert_eq!((t.hashsize, t.nsamples, t.callchaindepth), (64, 1024, 32));
    assert_eq!(m.console().len(), 1, "no diagnostic");
    unload(&m, module);
}

#[test]
fn sparse_cpus_are_supported() {
    let cfg = MachineConfig {
        cpus: vec![
            ksim::CpuState::Online,
            ksim::CpuState::Absent,
            ksim::CpuState::Online,
            ksim::CpuState::Disabled,
            ksim::CpuState::Online,
        ],
        ..MachineConfig::default()
    };
    let s = Sim::with(cfg, &[]);
    let p = s.root();
    let ci = s.cpuinfo(p);
    assert_eq!(ci.pm_ncpu, 5, "the highest CPU id plus one");
    s.finish();
}

#[test]
fn debugflags_select_the_traced_events() {
    let s = Sim::with(
        MachineConfig::default(),
        &[("kern.hwpmc.debugflags", "module=init")],
    );
    assert!(
        s.m.ktr()
            .iter()
            .any(|l| l.starts_with("module:init: npmc=17")),
        "{:?}",
        s.m.ktr()
    );
    assert_eq!(
        s.m.sysctl_str("kern.hwpmc.debugflags").as_deref(),
        Some("module=init")
    );
    s.m.sysctl_write_str("kern.hwpmc.debugflags", "pmc=allocate,release csw=*")
        .unwrap();
    let p = s.root();
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    s.release(p, id).unwrap();
    let ktr = s.m.ktr();
    assert!(
        ktr.iter()
            .any(|l| l.starts_with(&format!("pmc:allocate: id={id:#x}"))),
        "{ktr:?}"
    );
    assert!(
        ktr.iter()
            .any(|l| l.starts_with(&format!("pmc:release: id={id:#x}")))
    );
    assert!(ktr.iter().any(|l| l.starts_with("csw:swi: ")));
    assert!(
        !ktr.iter().any(|l| l.starts_with("pmc:start")),
        "start was not selected"
    );
    assert_eq!(
        s.m.sysctl_write_str("kern.hwpmc.debugflags", "pmc=bogus"),
        Err(EINVAL.get())
    );
    assert_eq!(
        s.m.sysctl_str("kern.hwpmc.debugflags").as_deref(),
        Some("pmc=allocate,release csw=*")
    );
    s.m.sysctl_write_str("kern.hwpmc.debugflags", "").unwrap();
    let n = s.m.ktr().len();
    let id = s.soft_tc(p);
    s.release(p, id).unwrap();
    assert_eq!(s.m.ktr().len(), n, "tracing is off");
    s.finish();
}

//! `sys/sys/pmc.h`: the hwpmc(4) system call interface.
//!
//! The ABI is the one of FreeBSD main in 2026 (`PMC_VERSION` 0x0A030000):
//! FreeBSD 15.0's 0x0A000000 plus the GETCAPS operation, the IBS, RAPL and
//! PERF classes and newer Intel CPU types. Everything 15.0 defines is
//! identical; the additions are listed in `tools/abi-check/manifest.rs`.

use bitflags::bitflags;

use crate::plain::impl_plain;
pub use crate::pmc_events::PMC_EV_DYN_COUNT;
pub use crate::pmc_mdep::PmcMdOpPmcallocate;

/// Name of the kernel module, as given to modfind(2).
pub const PMC_MODULE_NAME: &str = "hwpmc";
/// Size of the name fields of [`PmcInfo`] and [`PmcDynEventDescr`].
pub const PMC_NAME_MAX: usize = 64;
/// Most classes a machine can report in [`PmcOpGetcpuinfo`].
pub const PMC_CLASS_MAX: usize = 8;
/// Length of the kernel's CPU identification string (`kern.hwpmc.cpuid`).
pub const PMC_CPUID_LEN: usize = 64;

/// Major version: changes break older clients.
pub const PMC_VERSION_MAJOR: u32 = 0x0A;
/// Minor version: compatible additions (new classes, new operations).
pub const PMC_VERSION_MINOR: u32 = 0x03;
/// Patch level.
pub const PMC_VERSION_PATCH: u32 = 0x0000;
/// The version word exchanged by `PMC_OP_GETMODULEVERSION` and written in
/// the log's INITIALIZE record: `MAJOR << 24 | MINOR << 16 | PATCH`.
pub const PMC_VERSION: u32 =
    (PMC_VERSION_MAJOR << 24) | (PMC_VERSION_MINOR << 16) | PMC_VERSION_PATCH;

/// The first version whose driver has PMC_OP_GETCAPS (FreeBSD main, 2026;
/// 15.0 is 0x0A000000). A driver built in an older tree refuses the
/// operation as 15.0's does, with EINVAL.
pub const PMC_VERSION_WITH_GETCAPS: u32 = 0x0A03_0000;

/// Deepest call chain a sample may carry.
pub const PMC_CALLCHAIN_DEPTH_MAX: usize = 512;
/// Call chain `cpuflags` bit: the chain was taken in user space.
pub const PMC_CC_F_USERSPACE: u32 = 0x01;
/// Call chain `cpuflags` bit: typed payloads precede the PCs (AMD IBS).
pub const PMC_CC_F_MULTIPART: u32 = 0x02;

/// A PMC handle as returned by `PMC_OP_PMCALLOCATE` (`pmc_id_t`).
pub type PmcId = u32;
/// A counter value or reload count (`pmc_value_t`).
pub type PmcValue = u64;
/// The id no PMC ever has.
pub const PMC_ID_INVALID: PmcId = !0;
/// `pm_cpu` of a process-mode allocation: any CPU.
pub const PMC_CPU_ANY: u32 = !0;

// Default values of the kernel's tunables (the `_KERNEL` part of pmc.h).
/// Default `kern.hwpmc.hashsize`.
pub const PMC_HASH_SIZE: u32 = 1024;
/// Default `kern.hwpmc.mtxpoolsize`.
pub const PMC_MTXPOOL_SIZE: u32 = 2048;
/// Default `kern.hwpmc.logbuffersize`, in KiB.
pub const PMC_LOG_BUFFER_SIZE: u32 = 256;
/// Default `kern.hwpmc.nbuffers_pcpu`.
pub const PMC_NLOGBUFFERS_PCPU: u32 = 32;
/// Default `kern.hwpmc.nsamples`.
pub const PMC_NSAMPLES: u32 = 256;
/// Default `kern.hwpmc.callchaindepth`.
pub const PMC_CALLCHAIN_DEPTH: u32 = 128;
/// Default `kern.hwpmc.threadfreelist_max`.
pub const PMC_THREADLIST_MAX: u32 = 128;
/// Prefix of the driver's sysctl names.
pub const PMC_SYSCTL_NAME_PREFIX: &str = "kern.hwpmc.";

// The 32-bit PMC id: CPU (12 bits) | mode (4) | class (8) | row index (8).

/// Row index of a PMC id.
pub const fn pmc_id_to_rowindex(id: PmcId) -> u32 {
    id & 0xFF
}
/// Class of a PMC id (a raw [`PmcClass`] value).
pub const fn pmc_id_to_class(id: PmcId) -> u32 {
    (id & 0xFF00) >> 8
}
/// Mode of a PMC id (a raw [`PmcMode`] value).
pub const fn pmc_id_to_mode(id: PmcId) -> u32 {
    (id & 0xF_0000) >> 16
}
/// CPU of a PMC id; 0xFFF for a process-mode PMC.
pub const fn pmc_id_to_cpu(id: PmcId) -> u32 {
    (id & 0xFFF0_0000) >> 20
}
/// Builds a PMC id; each part is truncated to its field.
pub const fn pmc_id_make_id(cpu: u32, mode: u32, class: u32, rowindex: u32) -> PmcId {
    ((cpu & 0xFFF) << 20) | ((mode & 0xF) << 16) | ((class & 0xFF) << 8) | (rowindex & 0xFF)
}

abi_enum! {
    /// `enum pmc_cputype`: the kinds of CPU the driver distinguishes.
    pub enum PmcCputype: u32 {
        AmdK8 = 0x01 => ("AMD_K8", "AMD K8"),
        IntelCore = 0x87 => ("INTEL_CORE", "Intel Core Solo/Duo"),
        IntelCore2 = 0x88 => ("INTEL_CORE2", "Intel Core2"),
        IntelCore2Extreme = 0x89 => ("INTEL_CORE2EXTREME", "Intel Core2 Extreme"),
        IntelAtom = 0x8A => ("INTEL_ATOM", "Intel Atom"),
        IntelCorei7 = 0x8B => ("INTEL_COREI7", "Intel Core i7"),
        IntelWestmere = 0x8C => ("INTEL_WESTMERE", "Intel Westmere"),
        IntelSandybridge = 0x8D => ("INTEL_SANDYBRIDGE", "Intel Sandy Bridge"),
        IntelIvybridge = 0x8E => ("INTEL_IVYBRIDGE", "Intel Ivy Bridge"),
        IntelSandybridgeXeon = 0x8F => ("INTEL_SANDYBRIDGE_XEON", "Intel Sandy Bridge Xeon"),
        IntelIvybridgeXeon = 0x90 => ("INTEL_IVYBRIDGE_XEON", "Intel Ivy Bridge Xeon"),
        IntelHaswell = 0x91 => ("INTEL_HASWELL", "Intel Haswell"),
        IntelAtomSilvermont = 0x92 => ("INTEL_ATOM_SILVERMONT", "Intel Atom Silvermont"),
        IntelNehalemEx = 0x93 => ("INTEL_NEHALEM_EX", "Intel Nehalem Xeon 7500"),
        IntelWestmereEx = 0x94 => ("INTEL_WESTMERE_EX", "Intel Westmere Xeon E7"),
        IntelHaswellXeon = 0x95 => ("INTEL_HASWELL_XEON", "Intel Haswell Xeon E5 v3"),
        IntelBroadwell = 0x96 => ("INTEL_BROADWELL", "Intel Broadwell"),
        IntelBroadwellXeon = 0x97 => ("INTEL_BROADWELL_XEON", "Intel Broadwell Xeon"),
        IntelSkylake = 0x98 => ("INTEL_SKYLAKE", "Intel Skylake"),
        IntelSkylakeXeon = 0x99 => ("INTEL_SKYLAKE_XEON", "Intel Skylake Xeon"),
        IntelAtomGoldmont = 0x9A => ("INTEL_ATOM_GOLDMONT", "Intel Atom Goldmont"),
        IntelIcelake = 0x9B => ("INTEL_ICELAKE", "Intel Icelake"),
        IntelIcelakeXeon = 0x9C => ("INTEL_ICELAKE_XEON", "Intel Icelake Xeon"),
        IntelAlderlake = 0x9D => ("INTEL_ALDERLAKE", "Intel Alderlake"),
        IntelAtomGoldmontP = 0x9E => ("INTEL_ATOM_GOLDMONT_P", "Intel Atom Goldmont Plus"),
        IntelAtomTremont = 0x9F => ("INTEL_ATOM_TREMONT", "Intel Atom Tremont"),
        IntelEmeraldRapids = 0xA0 => ("INTEL_EMERALD_RAPIDS", "Intel Emerald Rapids"),
        IntelAlderlakeN = 0xA1 => ("INTEL_ALDERLAKEN", "Intel AlderlakeN"),
        IntelGraniteRapids = 0xA2 => ("INTEL_GRANITE_RAPIDS", "Intel Granite Rapids"),
        IntelMeteorLake = 0xA3 => ("INTEL_METEOR_LAKE", "Intel Meteor Lake"),
        IntelSapphireRapids = 0xA4 => ("INTEL_SAPPHIRE_RAPIDS", "Intel Sapphire Rapids"),
        Ppc7450 = 0x300 => ("PPC_7450", "PowerPC MPC7450"),
        PpcE500 = 0x340 => ("PPC_E500", "PowerPC e500 Core"),
        Ppc970 = 0x380 => ("PPC_970", "IBM PowerPC 970"),
        PpcPower8 = 0x390 => ("PPC_POWER8", "IBM POWER8"),
        Generic = 0x400 => ("GENERIC", "Generic"),
        Armv7CortexA5 = 0x500 => ("ARMV7_CORTEX_A5", "ARMv7 Cortex A5"),
        Armv7CortexA7 = 0x501 => ("ARMV7_CORTEX_A7", "ARMv7 Cortex A7"),
        Armv7CortexA8 = 0x502 => ("ARMV7_CORTEX_A8", "ARMv7 Cortex A8"),
        Armv7CortexA9 = 0x503 => ("ARMV7_CORTEX_A9", "ARMv7 Cortex A9"),
        Armv7CortexA15 = 0x504 => ("ARMV7_CORTEX_A15", "ARMv7 Cortex A15"),
        Armv7CortexA17 = 0x505 => ("ARMV7_CORTEX_A17", "ARMv7 Cortex A17"),
        Armv8CortexA53 = 0x600 => ("ARMV8_CORTEX_A53", "ARMv8 Cortex A53"),
        Armv8CortexA57 = 0x601 => ("ARMV8_CORTEX_A57", "ARMv8 Cortex A57"),
        Armv8CortexA76 = 0x602 => ("ARMV8_CORTEX_A76", "ARMv8 Cortex A76"),
    }
}

/// `PMC_CPU_FIRST`.
pub const PMC_CPU_FIRST: PmcCputype = PmcCputype::AmdK8;
/// `PMC_CPU_LAST`.
pub const PMC_CPU_LAST: PmcCputype = PmcCputype::Armv8CortexA76;

abi_enum! {
    /// `enum pmc_class`: families of counters, with explicit values.
    pub enum PmcClass: u32 {
        Tsc = 0x00 => ("TSC", "CPU Timestamp counter"),
        K8 = 0x02 => ("K8", "AMD K8 performance counters"),
        Ibs = 0x03 => ("IBS", "AMD IBS Counters"),
        Iaf = 0x06 => ("IAF", "Intel Core2/Atom, fixed function"),
        Iap = 0x07 => ("IAP", "Intel Core...Atom, programmable"),
        Ucf = 0x08 => ("UCF", "Intel Uncore fixed function"),
        Ucp = 0x09 => ("UCP", "Intel Uncore programmable"),
        Ppc7450 = 0x0D => ("PPC7450", "Motorola MPC7450 class"),
        Ppc970 = 0x0E => ("PPC970", "IBM PowerPC 970 class"),
        Soft = 0x0F => ("SOFT", "Software events"),
        Armv7 = 0x10 => ("ARMV7", "ARMv7"),
        Armv8 = 0x11 => ("ARMV8", "ARMv8"),
        E500 = 0x13 => ("E500", "Freescale e500 class"),
        Power8 = 0x15 => ("POWER8", "IBM POWER8 class"),
        Dmc620PmuCd2 = 0x16 => ("DMC620_PMU_CD2", "ARM DMC620 Memory Controller PMU CLKDIV2"),
        Dmc620PmuC = 0x17 => ("DMC620_PMU_C", "ARM DMC620 Memory Controller PMU CLK"),
        Cmn600Pmu = 0x18 => ("CMN600_PMU", "Arm CoreLink CMN600 Coherent Mesh Network PMU"),
        Rapl = 0x19 => ("RAPL", "AMD/Intel RAPL Energy counters"),
        Perf = 0x1A => ("PERF", "Intel APERF/MPERF counters"),
    }
}

/// `PMC_CLASS_FIRST`.
pub const PMC_CLASS_FIRST: PmcClass = PmcClass::Tsc;
/// `PMC_CLASS_LAST`. FreeBSD main leaves it at RAPL although PERF is
/// numbered after it; kept as is for source compatibility.
pub const PMC_CLASS_LAST: PmcClass = PmcClass::Rapl;

abi_enum! {
    /// `enum pmc_state`: hardware states (DISABLED, FREE) then software
    /// states of an allocated PMC.
    pub enum PmcState: u32 {
        Disabled = 0 => ("DISABLED", "administratively prohibited"),
        Free = 1 => ("FREE", "available"),
        Allocated = 2 => ("ALLOCATED", "allocated"),
        Stopped = 3 => ("STOPPED", "allocated, not counting"),
        Running = 4 => ("RUNNING", "allocated and counting"),
        Deleted = 5 => ("DELETED", "being destroyed"),
        Max = 6 => ("MAX", "sentinel"),
    }
}

/// `PMC_STATE_FIRST`.
pub const PMC_STATE_FIRST: PmcState = PmcState::Disabled;
/// `PMC_STATE_LAST`.
pub const PMC_STATE_LAST: PmcState = PmcState::Deleted;

abi_enum! {
    /// `enum pmc_mode`: system or process (thread-virtual), sampling or
    /// counting.
    pub enum PmcMode: u32 {
        Ss = 0 => ("SS", "system-wide sampling"),
        Sc = 1 => ("SC", "system-wide counting"),
        Ts = 2 => ("TS", "process-private sampling"),
        Tc = 3 => ("TC", "process-private counting"),
    }
}

/// `PMC_MODE_FIRST`.
pub const PMC_MODE_FIRST: PmcMode = PmcMode::Ss;
/// `PMC_MODE_LAST`.
pub const PMC_MODE_LAST: PmcMode = PmcMode::Tc;

impl PmcMode {
    /// `PMC_IS_COUNTING_MODE`.
    pub const fn is_counting(self) -> bool {
        matches!(self, PmcMode::Sc | PmcMode::Tc)
    }
    /// `PMC_IS_SAMPLING_MODE`.
    pub const fn is_sampling(self) -> bool {
        matches!(self, PmcMode::Ss | PmcMode::Ts)
    }
    /// `PMC_IS_SYSTEM_MODE`.
    pub const fn is_system(self) -> bool {
        matches!(self, PmcMode::Ss | PmcMode::Sc)
    }
    /// `PMC_IS_VIRTUAL_MODE`.
    pub const fn is_virtual(self) -> bool {
        matches!(self, PmcMode::Ts | PmcMode::Tc)
    }
}

abi_enum! {
    /// `enum pmc_disp`: how a row (a hardware counter on every CPU) is used.
    pub enum PmcDisp: u32 {
        Standalone = 0 => ("STANDALONE", "global/disabled counters"),
        Free = 1 => ("FREE", "free/available"),
        Thread = 2 => ("THREAD", "thread-virtual PMCs"),
        Unknown = 3 => ("UNKNOWN", "sentinel"),
    }
}

/// `PMC_DISP_FIRST`.
pub const PMC_DISP_FIRST: PmcDisp = PmcDisp::Standalone;
/// `PMC_DISP_LAST`.
pub const PMC_DISP_LAST: PmcDisp = PmcDisp::Thread;

abi_enum! {
    /// `enum pmc_ops`: the first argument of the hwpmc system call.
    pub enum PmcOp: u32 {
        Configurelog = 0 => ("CONFIGURELOG", "Set log file"),
        Flushlog = 1 => ("FLUSHLOG", "Flush log file"),
        Getcpuinfo = 2 => ("GETCPUINFO", "Get system CPU information"),
        Getdriverstats = 3 => ("GETDRIVERSTATS", "Get driver statistics"),
        Getmoduleversion = 4 => ("GETMODULEVERSION", "Get module version"),
        Getpmcinfo = 5 => ("GETPMCINFO", "Get per-cpu PMC information"),
        Pmcadmin = 6 => ("PMCADMIN", "Set PMC state"),
        Pmcallocate = 7 => ("PMCALLOCATE", "Allocate and configure a PMC"),
        Pmcattach = 8 => ("PMCATTACH", "Attach a PMC to a process"),
        Pmcdetach = 9 => ("PMCDETACH", "Detach a PMC from a process"),
        Pmcgetmsr = 10 => ("PMCGETMSR", "Get a PMC's hardware address"),
        Pmcrelease = 11 => ("PMCRELEASE", "Release a PMC"),
        Pmcrw = 12 => ("PMCRW", "Read/Set a PMC"),
        Pmcsetcount = 13 => ("PMCSETCOUNT", "Set initial count/sampling rate"),
        Pmcstart = 14 => ("PMCSTART", "Start a PMC"),
        Pmcstop = 15 => ("PMCSTOP", "Stop a PMC"),
        Writelog = 16 => ("WRITELOG", "Write a cookie to the log file"),
        Closelog = 17 => ("CLOSELOG", "Close log file"),
        Getdyneventinfo = 18 => ("GETDYNEVENTINFO", "Get dynamic events list"),
        Getcaps = 19 => ("GETCAPS", "Get capabilities"),
    }
}

bitflags! {
    /// `enum pmc_caps`: what a counter can do.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct PmcCaps: u32 {
        /// generate interrupts
        const INTERRUPT = 1 << 0;
        /// count user-mode events
        const USER = 1 << 1;
        /// count system-mode events
        const SYSTEM = 1 << 2;
        /// do edge detection of events
        const EDGE = 1 << 3;
        /// ignore events below a threshold
        const THRESHOLD = 1 << 4;
        /// read PMC counter
        const READ = 1 << 5;
        /// reprogram PMC counter
        const WRITE = 1 << 6;
        /// invert comparison sense
        const INVERT = 1 << 7;
        /// further qualify monitored events
        const QUALIFIER = 1 << 8;
        /// perform precise sampling
        const PRECISE = 1 << 9;
        /// tag upstream events
        const TAGGING = 1 << 10;
        /// cascade counters
        const CASCADE = 1 << 11;
        /// system wide counter
        const SYSWIDE = 1 << 12;
        /// NUMA domain wide counter
        const DOMWIDE = 1 << 13;
    }
}

/// `PMC_CAP_FIRST`.
pub const PMC_CAP_FIRST: PmcCaps = PmcCaps::INTERRUPT;
/// `PMC_CAP_LAST`.
pub const PMC_CAP_LAST: PmcCaps = PmcCaps::DOMWIDE;

impl PmcCaps {
    /// The header's description of a single capability bit.
    pub const fn description(self) -> Option<&'static str> {
        Some(match self.bits() {
            0x1 => "generate interrupts",
            0x2 => "count user-mode events",
            0x4 => "count system-mode events",
            0x8 => "do edge detection of events",
            0x10 => "ignore events below a threshold",
            0x20 => "read PMC counter",
            0x40 => "reprogram PMC counter",
            0x80 => "invert comparison sense",
            0x100 => "further qualify monitored events",
            0x200 => "perform precise sampling",
            0x400 => "tag upstream events",
            0x800 => "cascade counters",
            0x1000 => "system wide counter",
            0x2000 => "NUMA domain wide counter",
            _ => return None,
        })
    }
}

bitflags! {
    /// `PMC_F_*`: modifiers of allocate, rw and admin requests, and the
    /// driver's internal per-PMC flags.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct PmcFlags: u32 {
        /// Unused (was FORCE for PMCADMIN).
        const UNUSED1 = 0x0000_0001;
        /// ALLOCATE: follow the target's descendants.
        const DESCENDANTS = 0x0000_0002;
        /// ALLOCATE: log the value at every context switch.
        const LOG_PROCCSW = 0x0000_0004;
        /// ALLOCATE: log the per-process value at exit.
        const LOG_PROCEXIT = 0x0000_0008;
        /// PMCRW: write a new value.
        const NEWVALUE = 0x0000_0010;
        /// PMCRW: return the old value.
        const OLDVALUE = 0x0000_0020;
        /// ALLOCATE: capture call chains with samples.
        const CALLCHAIN = 0x0000_0080;
        /// ALLOCATE: capture the user stack (pmcstat -U).
        const USERCALLCHAIN = 0x0000_0100;
        /// ALLOCATE: `pm_ev` is only a userland index; the counter
        /// configuration travels in the class-dependent `pm_md`.
        const EV_PMU = 0x0000_0200;
        /// Internal: attached to its owner.
        const ATTACHED_TO_OWNER = 0x0001_0000;
        /// Internal: needs a log file.
        const NEEDS_LOGFILE = 0x0002_0000;
        /// Internal: attached at least once.
        const ATTACH_DONE = 0x0004_0000;
    }
}

/// `struct pmc_op_pmcallocate`: PMC_OP_PMCALLOCATE.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PmcOpPmcallocate {
    /// Capabilities required (`PMC_CAP_*`).
    pub pm_caps: u32,
    /// CPU for a system mode, or [`PMC_CPU_ANY`].
    pub pm_cpu: u32,
    /// [`PmcClass`].
    pub pm_class: u32,
    /// Event code (`enum pmc_event`).
    pub pm_ev: u32,
    /// `PMC_F_*`.
    pub pm_flags: u32,
    /// [`PmcMode`].
    pub pm_mode: u32,
    /// Out: the new PMC's id.
    pub pm_pmcid: PmcId,
    /// Initial count, or sampling reload count.
    pub pm_count: PmcValue,
    /// Machine-dependent configuration.
    pub pm_md: PmcMdOpPmcallocate,
}

/// `struct pmc_op_pmcadmin`: PMC_OP_PMCADMIN.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpPmcadmin {
    /// CPU number.
    pub pm_cpu: i32,
    /// Flags (none defined).
    pub pm_flags: u32,
    /// Row index.
    pub pm_pmc: i32,
    /// Wanted [`PmcState`] (DISABLED or FREE).
    pub pm_state: u32,
}

/// `struct pmc_op_pmcattach`: PMC_OP_PMCATTACH and PMC_OP_PMCDETACH.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpPmcattach {
    /// The PMC.
    pub pm_pmc: PmcId,
    /// The target process.
    pub pm_pid: i32,
}

/// `struct pmc_op_pmcsetcount`: PMC_OP_PMCSETCOUNT.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpPmcsetcount {
    /// New initial or reload count.
    pub pm_count: PmcValue,
    /// The PMC.
    pub pm_pmcid: PmcId,
}

/// `struct pmc_op_pmcrw`: PMC_OP_PMCRW.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpPmcrw {
    /// `PMC_F_OLDVALUE` and/or `PMC_F_NEWVALUE`.
    pub pm_flags: u32,
    /// The PMC.
    pub pm_pmcid: PmcId,
    /// In: the new value; out: the old value.
    pub pm_value: PmcValue,
}

/// `struct pmc_info`: one row of PMC_OP_GETPMCINFO.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmcInfo {
    /// Row name, NUL-terminated.
    pub pm_name: [u8; PMC_NAME_MAX],
    /// [`PmcClass`].
    pub pm_class: u32,
    /// Whether the row is enabled.
    pub pm_enabled: i32,
    /// [`PmcDisp`].
    pub pm_rowdisp: u32,
    /// Owner pid, or -1.
    pub pm_ownerpid: i32,
    /// [`PmcMode`] of the current allocation.
    pub pm_mode: u32,
    /// Current event.
    pub pm_event: u32,
    /// Current `PMC_F_*`.
    pub pm_flags: u32,
    /// The padding C leaves before `pm_reloadcount` where `u64` is 8-byte
    /// aligned, made explicit so the struct can be copied out as bytes.
    pub pm_pad: [u8; PMC_INFO_PAD],
    /// Reload count of a sampling PMC.
    pub pm_reloadcount: PmcValue,
}

/// Bytes of padding in [`PmcInfo`]: 4 where `u64` is 8-byte aligned
/// (amd64, arm64), none on i386.
pub const PMC_INFO_PAD: usize = if core::mem::align_of::<u64>() == 8 {
    4
} else {
    0
};

/// `struct pmc_op_getpmcinfo`: PMC_OP_GETPMCINFO; `npmc` [`PmcInfo`]
/// entries follow the header in the caller's buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmcOpGetpmcinfo {
    /// CPU to describe.
    pub pm_cpu: i32,
    /// Start of the flexible array.
    pub pm_pmcs: [PmcInfo; 0],
}

/// `struct pmc_classinfo`: one class of PMC_OP_GETCPUINFO.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcClassinfo {
    /// [`PmcClass`].
    pub pm_class: u32,
    /// `PMC_CAP_*` of the class.
    pub pm_caps: u32,
    /// Counter width in bits.
    pub pm_width: u32,
    /// Number of rows of the class.
    pub pm_num: u32,
}

/// `struct pmc_op_getcpuinfo`: PMC_OP_GETCPUINFO.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpGetcpuinfo {
    /// [`PmcCputype`].
    pub pm_cputype: u32,
    /// Highest CPU number plus one.
    pub pm_ncpu: u32,
    /// Rows per CPU.
    pub pm_npmc: u32,
    /// Valid entries of `pm_classes`.
    pub pm_nclass: u32,
    /// The classes.
    pub pm_classes: [PmcClassinfo; PMC_CLASS_MAX],
}

/// `struct pmc_op_configurelog`: PMC_OP_CONFIGURELOG.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpConfigurelog {
    /// Flags (none defined).
    pub pm_flags: i32,
    /// Descriptor to log to, or -1 to stop logging.
    pub pm_logfd: i32,
}

/// `struct pmc_op_getdriverstats`: PMC_OP_GETDRIVERSTATS; the kernel's
/// 64-bit counters truncated to `unsigned int`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpGetdriverstats {
    /// Interrupts ignored.
    pub pm_intr_ignored: u32,
    /// Interrupts processed.
    pub pm_intr_processed: u32,
    /// Samples dropped because a ring was full.
    pub pm_intr_bufferfull: u32,
    /// System calls.
    pub pm_syscalls: u32,
    /// System calls that failed.
    pub pm_syscall_errors: u32,
    /// Log buffer requests.
    pub pm_buffer_requests: u32,
    /// Log buffer requests that failed.
    pub pm_buffer_requests_failed: u32,
    /// Sample ring processing passes.
    pub pm_log_sweeps: u32,
}

/// `struct pmc_op_simple`: PMC_OP_PMCRELEASE, PMCSTART and PMCSTOP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpSimple {
    /// The PMC.
    pub pm_pmcid: PmcId,
}

/// `struct pmc_op_writelog`: PMC_OP_WRITELOG.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpWritelog {
    /// Cookie written as a USERDATA record.
    pub pm_userdata: u32,
}

/// `struct pmc_op_getmsr`: PMC_OP_PMCGETMSR.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpGetmsr {
    /// Out: the counter's RDPMC index.
    pub pm_msr: u32,
    /// The PMC.
    pub pm_pmcid: PmcId,
}

/// `struct pmc_dyn_event_descr`: one dynamic (SOFT) event.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmcDynEventDescr {
    /// Event name, NUL-terminated.
    pub pm_ev_name: [u8; PMC_NAME_MAX],
    /// Event code.
    pub pm_ev_code: u32,
}

/// `struct pmc_op_getdyneventinfo`: PMC_OP_GETDYNEVENTINFO.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PmcOpGetdyneventinfo {
    /// In: the class (only SOFT has dynamic events).
    pub pm_class: u32,
    /// Out: valid entries of `pm_events`.
    pub pm_nevent: u32,
    /// Out: the events.
    pub pm_events: [PmcDynEventDescr; PMC_EV_DYN_COUNT as usize],
}

/// `struct pmc_op_caps`: PMC_OP_GETCAPS.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpCaps {
    /// The PMC.
    pub pm_pmcid: PmcId,
    /// Out: `PMC_CAP_*` of its row.
    pub pm_caps: u32,
}

// ----- Extension: overflow notification (hwpmc(4) NOTIFICATIONS) -----
//
// FreeBSD numbers `enum pmc_ops` from 0; the extension's operations sit
// at 0x504d0000 ("PM" in the upper half), out of reach of FreeBSD's
// future operations. A driver without them answers EINVAL (an unknown
// operation), which is how a program learns there is no extension.

/// The first extension operation.
pub const PMC_OP_EXT_BASE: u32 = 0x504d_0000;
/// `PMC_OP_EXT_GETCAPS`: which extensions the driver has
/// ([`PmcOpExtcaps`]).
pub const PMC_OP_EXT_GETCAPS: u32 = PMC_OP_EXT_BASE;
/// `PMC_OP_EXT_NOTIFY`: notification on a sampling PMC ([`PmcOpNotify`]).
pub const PMC_OP_EXT_NOTIFY: u32 = PMC_OP_EXT_BASE + 1;
/// The extensions' version in [`PmcOpExtcaps::pm_version`].
pub const PMC_EXT_VERSION: u32 = 1;
/// `pm_caps` bit: PMC_OP_EXT_NOTIFY is there.
pub const PMC_EXTCAP_NOTIFY: u32 = 0x1;
/// `pm_flags` of [`PmcOpNotify`]: `pm_count` counts bytes of the PMC's
/// sample records written to the log instead of samples.
pub const PMC_NOTIFY_BYTES: u32 = 0x1;
/// The flags PMC_OP_EXT_NOTIFY knows.
pub const PMC_NOTIFY_FLAGS: u32 = PMC_NOTIFY_BYTES;
/// `pn_flags` of [`PmcNotification`]: no notification follows (the
/// refresh count ran out, or the PMC was released).
pub const PMC_NOTIFICATION_END: u32 = 0x1;

/// `struct pmc_op_extcaps`: PMC_OP_EXT_GETCAPS's answer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpExtcaps {
    /// Out: [`PMC_EXT_VERSION`].
    pub pm_version: u32,
    /// Out: `PMC_EXTCAP_*`.
    pub pm_caps: u32,
}

/// `struct pmc_op_notify`: PMC_OP_EXT_NOTIFY.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcOpNotify {
    /// A sampling PMC of the caller's.
    pub pm_pmcid: PmcId,
    /// `PMC_NOTIFY_*`.
    pub pm_flags: u32,
    /// Samples (or log bytes) per notification, at least 1.
    pub pm_count: u32,
    /// Overflows before the PMC stops counting; 0: no limit.
    pub pm_refresh: u32,
    /// Signal sent to the calling thread at each notification; 0: none.
    pub pm_signo: i32,
    /// Out: the notification descriptor.
    pub pm_fd: i32,
    /// Zero.
    pub pm_spare: [u32; 2],
}

/// `struct pmc_notification`: what a read(2) of the notification
/// descriptor returns. Cumulative counts: a reader that fell behind sees
/// how many notifications it missed.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmcNotification {
    /// The PMC.
    pub pn_pmcid: PmcId,
    /// `PMC_NOTIFICATION_*`.
    pub pn_flags: u32,
    /// The CPU of the last sample counted.
    pub pn_cpu: u32,
    /// Zero.
    pub pn_spare: u32,
    /// Notifications so far.
    pub pn_notifications: u64,
    /// Samples of the PMC taken so far.
    pub pn_samples: u64,
    /// Samples of the PMC lost on a full ring so far.
    pub pn_dropped: u64,
}

impl_plain!(
    PmcOpPmcallocate,
    PmcOpPmcadmin,
    PmcOpPmcattach,
    PmcOpPmcsetcount,
    PmcOpPmcrw,
    PmcInfo,
    PmcOpGetpmcinfo,
    PmcClassinfo,
    PmcOpGetcpuinfo,
    PmcOpConfigurelog,
    PmcOpGetdriverstats,
    PmcOpSimple,
    PmcOpWritelog,
    PmcOpGetmsr,
    PmcDynEventDescr,
    PmcOpGetdyneventinfo,
    PmcOpCaps,
    PmcOpExtcaps,
    PmcOpNotify,
    PmcNotification,
);

crate::plain::impl_as_bytes!(
    PmcOpPmcadmin => [i32, u32, i32, u32],
    PmcOpPmcattach => [u32, i32],
    PmcOpPmcrw => [u32, u32, u64],
    PmcInfo => [[u8; PMC_NAME_MAX], u32, i32, u32, i32, u32, u32, u32, [u8; PMC_INFO_PAD], u64],
    PmcClassinfo => [u32, u32, u32, u32],
    PmcOpGetcpuinfo => [u32, u32, u32, u32, [PmcClassinfo; PMC_CLASS_MAX]],
    PmcOpConfigurelog => [i32, i32],
    PmcOpGetdriverstats => [u32, u32, u32, u32, u32, u32, u32, u32],
    PmcOpSimple => [u32],
    PmcOpWritelog => [u32],
    PmcOpGetmsr => [u32, u32],
    PmcDynEventDescr => [[u8; PMC_NAME_MAX], u32],
    PmcOpGetdyneventinfo => [u32, u32, [PmcDynEventDescr; PMC_EV_DYN_COUNT as usize]],
    PmcOpCaps => [u32, u32],
    PmcOpExtcaps => [u32, u32],
    PmcOpNotify => [u32, u32, u32, u32, i32, i32, [u32; 2]],
    PmcNotification => [u32, u32, u32, u32, u64, u64, u64],
);

impl core::fmt::Debug for PmcOpPmcallocate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PmcOpPmcallocate")
            .field("pm_caps", &self.pm_caps)
            .field("pm_cpu", &self.pm_cpu)
            .field("pm_class", &self.pm_class)
            .field("pm_ev", &self.pm_ev)
            .field("pm_flags", &self.pm_flags)
            .field("pm_mode", &self.pm_mode)
            .field("pm_pmcid", &self.pm_pmcid)
            .field("pm_count", &self.pm_count)
            .finish_non_exhaustive()
    }
}

/// The bytes of a fixed-size C string field up to its first NUL.
pub fn c_field_str(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

/// Copies `src` into a fixed-size C string field, truncating so that a NUL
/// always ends it, and zero-fills the rest.
pub fn set_c_field_str(field: &mut [u8], src: &[u8]) {
    let n = src.len().min(field.len().saturating_sub(1));
    field[..n].copy_from_slice(&src[..n]);
    field[n..].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Plain;
    use core::mem::{align_of, offset_of, size_of};

    #[test]
    fn version_word() {
        assert_eq!(PMC_VERSION, 0x0A03_0000);
    }

    #[test]
    fn id_encoding_round_trips_every_field() {
        let id = pmc_id_make_id(0xABC, 0x3, 0x0F, 0x7E);
        assert_eq!(id, 0xABC3_0F7E);
        assert_eq!(pmc_id_to_cpu(id), 0xABC);
        assert_eq!(pmc_id_to_mode(id), 3);
        assert_eq!(pmc_id_to_class(id), 0x0F);
        assert_eq!(pmc_id_to_rowindex(id), 0x7E);
        // Process-mode ids carry PMC_CPU_ANY truncated to 12 bits.
        assert_eq!(pmc_id_to_cpu(pmc_id_make_id(PMC_CPU_ANY, 2, 0, 0)), 0xFFF);
        // Oversized parts do not bleed into neighbouring fields.
        assert_eq!(pmc_id_make_id(0, 0x1F, 0x1FF, 0x1FF), 0x000F_FFFF);
    }

    #[test]
    fn ops_are_numbered_from_zero_to_getcaps() {
        for (i, op) in PmcOp::ALL.iter().enumerate() {
            assert_eq!(op.raw() as usize, i);
        }
        assert_eq!(PmcOp::Getcaps.raw(), 19);
        assert_eq!(PmcOp::from_raw(20), None);
    }

    #[test]
    fn enum_conversions_reject_holes() {
        assert_eq!(PmcClass::from_raw(0x03), Some(PmcClass::Ibs));
        assert_eq!(PmcClass::from_raw(0x01), None, "K7 was retired");
        assert_eq!(PmcClass::from_raw(0x0A), None, "XSCALE was retired");
        assert_eq!(PmcClass::try_from(0x1A), Ok(PmcClass::Perf));
        assert_eq!(
            PmcCputype::from_name("INTEL_SAPPHIRE_RAPIDS"),
            Some(PmcCputype::IntelSapphireRapids)
        );
        assert_eq!(
            PmcCputype::from_raw(0x100),
            None,
            "XScale CPUs were retired"
        );
    }

    #[test]
    fn mode_predicates_match_the_header_macros() {
        use PmcMode::*;
        assert!(Ss.is_system() && Ss.is_sampling() && !Ss.is_counting() && !Ss.is_virtual());
        assert!(Sc.is_system() && Sc.is_counting());
        assert!(Ts.is_virtual() && Ts.is_sampling());
        assert!(Tc.is_virtual() && Tc.is_counting() && !Tc.is_system());
    }

    #[test]
    fn lp64_layouts() {
        // Independent of the header check: the numbers the reference gives.
        assert_eq!(
            size_of::<PmcOpPmcallocate>(),
            if cfg!(target_pointer_width = "64") {
                72
            } else {
                68
            }
        );
        assert_eq!(
            offset_of!(PmcOpPmcallocate, pm_md),
            if cfg!(target_pointer_width = "64") {
                40
            } else {
                36
            }
        );
        assert_eq!(
            size_of::<PmcInfo>(),
            if cfg!(target_pointer_width = "64") {
                104
            } else {
                100
            }
        );
        assert_eq!(size_of::<PmcOpGetcpuinfo>(), 144);
        assert_eq!(
            offset_of!(PmcOpGetpmcinfo, pm_pmcs),
            align_of::<PmcInfo>().max(4)
        );
        assert_eq!(size_of::<PmcOpGetdyneventinfo>(), 8 + 0x1000 * 68);
        assert_eq!(size_of::<PmcOpGetdriverstats>(), 32);
    }

    #[test]
    fn plain_read_from_bytes() {
        let mut bytes = [0u8; 16];
        bytes[0..4].copy_from_slice(&PmcFlags::OLDVALUE.bits().to_ne_bytes());
        bytes[4..8].copy_from_slice(&0x1234u32.to_ne_bytes());
        bytes[8..16].copy_from_slice(&42u64.to_ne_bytes());
        let rw = PmcOpPmcrw::read_from(&bytes).unwrap();
        assert_eq!(
            rw,
            PmcOpPmcrw {
                pm_flags: 0x20,
                pm_pmcid: 0x1234,
                pm_value: 42
            }
        );
        assert!(PmcOpPmcrw::read_from(&bytes[..15]).is_none());
        assert_eq!(PmcOpPmcallocate::zeroed().pm_count, 0);
    }

    #[test]
    fn c_string_fields() {
        let mut f = [0xFFu8; 8];
        set_c_field_str(&mut f, b"SOFT-CLOCK.HARD");
        assert_eq!(&f, b"SOFT-CL\0");
        assert_eq!(c_field_str(&f), b"SOFT-CL");
        set_c_field_str(&mut f, b"ab");
        assert_eq!(&f, b"ab\0\0\0\0\0\0");
    }
}

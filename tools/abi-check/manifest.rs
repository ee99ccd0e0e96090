//! The ABI manifest: every size, alignment, field offset and constant of
//! `uapi` that FreeBSD's headers also define, paired with the C expression
//! that yields the same number.
//!
//! The host binary reads the C expressions from here and compiles them for
//! each FreeBSD target; the same manifest, compiled as a `no_std` object for
//! that target, carries the Rust values in [`UAPI_ABI_VALUES`]. Entries are
//! built in one fixed order, so index `i` means the same item on both sides.
#![no_std]

use core::mem::{align_of, offset_of, size_of, size_of_val};

use uapi::hwt::*;
use uapi::hwt_record::HwtRecordType;
use uapi::pmc::*;
use uapi::pmc_events::*;
use uapi::pmc_mdep::{arm64, x86};
use uapi::pmckern::*;
use uapi::pmclog::*;

/// The FreeBSD targets the manifest is checked on, as a bit set.
pub type Targets = u8;
/// amd64 (`x86_64-freebsd`).
pub const AMD64: Targets = 1;
/// arm64 (`aarch64-freebsd`).
pub const ARM64: Targets = 2;
/// i386 (`x86-freebsd`).
pub const I386: Targets = 4;
/// The 64-bit targets.
pub const LP64: Targets = AMD64 | ARM64;
/// amd64 and i386.
pub const X86: Targets = AMD64 | I386;
/// Every target.
pub const ALL: Targets = AMD64 | ARM64 | I386;

/// Something the 2026 ABI has that FreeBSD 15.0's installed headers lack
/// (or no longer have), and where it was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addition {
    /// What differs.
    pub what: &'static str,
    /// The FreeBSD source (file and commit) the 2026 value comes from.
    pub source: &'static str,
}

/// `PMC_VERSION_MINOR` 0x03, so `PMC_VERSION` 0x0A030000.
pub const ADD_VERSION: Addition = Addition {
    what: "PMC_VERSION 0x0A030000 (minor 0x03; FreeBSD 15.0 has 0x0A000000)",
    source: "sys/sys/pmc.h @ 5369f8e7 (2026)",
};
/// Operation 19.
pub const ADD_GETCAPS: Addition = Addition {
    what: "PMC_OP_GETCAPS (19) and struct pmc_op_caps",
    source: "sys/sys/pmc.h @ 5369f8e7 (2026)",
};
/// AMD Instruction Based Sampling.
pub const ADD_IBS: Addition = Addition {
    what: "PMC_CLASS_IBS (0x03) and the pm_ibs member of the amd64/i386 allocation union",
    source: "sys/sys/pmc.h @ 5369f8e7, sys/dev/hwpmc/hwpmc_ibs.h @ 2c8bbd20 (2026)",
};
/// RAPL energy counters.
pub const ADD_RAPL: Addition = Addition {
    what: "PMC_CLASS_RAPL (0x19), which is also PMC_CLASS_LAST",
    source: "sys/sys/pmc.h @ 5369f8e7, sys/dev/hwpmc/hwpmc_rapl.h @ a6c9cdc4 (2026)",
};
/// APERF/MPERF counters.
pub const ADD_PERF: Addition = Addition {
    what: "PMC_CLASS_PERF (0x1A)",
    source: "sys/sys/pmc.h @ 5369f8e7, sys/dev/hwpmc/hwpmc_perf.h @ 5369f8e7 (2026)",
};
/// Newer Intel CPU types.
pub const ADD_CPUTYPES: Addition = Addition {
    what: "PMC_CPU_INTEL_EMERALD_RAPIDS..INTEL_SAPPHIRE_RAPIDS (0xA0-0xA4)",
    source: "sys/sys/pmc.h @ 5369f8e7 (2026)",
};
/// Multipart call chains.
pub const ADD_MULTIPART: Addition = Addition {
    what: "PMC_CC_F_MULTIPART (0x02) call chain flag",
    source: "sys/sys/pmc.h @ 5369f8e7 (2026)",
};
/// arm64 allocation flags.
pub const ADD_ARM64_FLAGS: Addition = Addition {
    what: "pm_md_flags in the arm64 allocation union, and PM_MD_RAW_EVENT",
    source: "sys/arm64/include/pmc_mdep.h @ 0162500b",
};
/// Retired names.
pub const ADD_RETIRED: Addition = Addition {
    what: "PMC_CLASS_XSCALE (0x0A) and PMC_CPU_INTEL_XSCALE (0x100) are gone",
    source: "sys/sys/pmc.h @ 5369f8e7 (2026)",
};

/// hwpmc's extended-error categories.
pub const ADD_EXTERR_CATS: Addition = Addition {
    what: "EXTERR_CAT_HWPMC_IBS (18), EXTERR_CAT_HWPMC_AMD (20), EXTERR_CAT_HWPMC_MOD (21)",
    source: "sys/sys/exterr_cat.h @ 20977828 (2026)",
};

/// Every deliberate difference from FreeBSD 15.0's headers, in one place.
pub const ADDITIONS_2026: &[Addition] = &[
    ADD_VERSION,
    ADD_GETCAPS,
    ADD_IBS,
    ADD_RAPL,
    ADD_PERF,
    ADD_CPUTYPES,
    ADD_MULTIPART,
    ADD_ARM64_FLAGS,
    ADD_RETIRED,
    ADD_EXTERR_CATS,
];

/// The C side of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CExpr {
    /// A C constant expression, e.g. `PMC_VERSION`.
    Expr(&'static str),
    /// `prefix` followed by `name`, e.g. `PMC_CLASS_` `TSC`.
    Name(&'static str, &'static str),
    /// `sizeof(type)`.
    Sizeof(&'static str),
    /// `_Alignof(type)`.
    Alignof(&'static str),
    /// `offsetof(type, member)`.
    Offsetof(&'static str, &'static str),
    /// `sizeof(((type *)0)->member)`: the member's own size.
    MemberSize(&'static str, &'static str),
    /// `PMC_EV_<class>__BLOCK_START`, the enumerator `__PMC_EV_BLOCK`
    /// makes before a class's events.
    BlockStart(&'static str),
}

/// Which C translation unit can evaluate an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Userland includes.
    User,
    /// `-D_KERNEL` includes (kernel-only constants).
    Kernel,
}

/// One compared item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The C expression.
    pub c: CExpr,
    /// The Rust value on the target the manifest was compiled for.
    pub value: u64,
    /// Bytes that matter: both sides are truncated to this width.
    pub width: u8,
    /// Targets where C defines the item.
    pub targets: Targets,
    /// Set when FreeBSD 15.0 lacks or differs on the item on purpose.
    pub addition: Option<&'static Addition>,
    /// Translation unit.
    pub unit: Unit,
}

const EMPTY: Entry = Entry {
    c: CExpr::Expr("0"),
    value: 0,
    width: 8,
    targets: 0,
    addition: None,
    unit: Unit::User,
};

/// Most entries the manifest can hold.
pub const CAPACITY: usize = 4096;

/// The ordered entries.
#[derive(Debug, Clone, Copy)]
pub struct Manifest {
    entries: [Entry; CAPACITY],
    len: usize,
    /// Context for the entries pushed next.
    targets: Targets,
    addition: Option<&'static Addition>,
    unit: Unit,
}

impl Manifest {
    const fn new() -> Self {
        Manifest {
            entries: [EMPTY; CAPACITY],
            len: 0,
            targets: ALL,
            addition: None,
            unit: Unit::User,
        }
    }

    const fn push(&mut self, c: CExpr, value: u64, width: usize) {
        assert!(self.len < CAPACITY, "manifest capacity exceeded");
        self.entries[self.len] = Entry {
            c,
            value,
            width: width as u8,
            targets: self.targets,
            addition: self.addition,
            unit: self.unit,
        };
        self.len += 1;
    }

    /// The entries in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries[..self.len]
    }

    /// Number of entries.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// True when there is no entry.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    const fn values(&self) -> [u64; CAPACITY] {
        let mut v = [0u64; CAPACITY];
        let mut i = 0;
        while i < self.len {
            v[i] = self.entries[i].value;
            i += 1;
        }
        v
    }
}

/// A constant whose C name is its Rust name.
macro_rules! constant {
    ($m:ident; $($name:ident),+ $(,)?) => {
        $( $m.push(CExpr::Expr(stringify!($name)), $name as u64, size_of_val(&$name)); )+
    };
}

/// A C expression and the Rust value it must equal.
macro_rules! expr {
    ($m:ident; $($c:literal => $v:expr),+ $(,)?) => {
        $( $m.push(CExpr::Expr($c), $v as u64, size_of_val(&$v)); )+
    };
}

/// Size, alignment and field offsets of a struct or union. Fields listed
/// bare have the same name on both sides; `"c" => expr` gives the Rust
/// offset of a C member explicitly.
macro_rules! layout {
    ($m:ident; $cty:literal, $rty:ty { $($f:ident),* $(,)? } $({ $($cf:literal => $off:expr),* $(,)? })?) => {
        $m.push(CExpr::Sizeof($cty), size_of::<$rty>() as u64, 8);
        $m.push(CExpr::Alignof($cty), align_of::<$rty>() as u64, 8);
        $( $m.push(CExpr::Offsetof($cty, stringify!($f)), offset_of!($rty, $f) as u64, 8); )*
        $($( $m.push(CExpr::Offsetof($cty, $cf), ($off) as u64, 8); )*)?
    };
}

/// The size of each named member of a struct or union, as the Rust type
/// of that member gives it.
macro_rules! member_sizes {
    ($m:ident; $cty:literal, $($f:literal => $rty:ty),+ $(,)?) => {
        $( $m.push(CExpr::MemberSize($cty, $f), size_of::<$rty>() as u64, 8); )+
    };
}

/// The origin of each cputype that FreeBSD 15.0 lacks.
const fn cputype_addition(c: PmcCputype) -> Option<&'static Addition> {
    match c as u32 {
        0xA0..=0xA4 => Some(&ADD_CPUTYPES),
        _ => None,
    }
}

const fn class_addition(c: PmcClass) -> Option<&'static Addition> {
    match c {
        PmcClass::Ibs => Some(&ADD_IBS),
        PmcClass::Rapl => Some(&ADD_RAPL),
        PmcClass::Perf => Some(&ADD_PERF),
        _ => None,
    }
}

#[cfg(not(feature = "selftest-wrong-offset"))]
const PMCRW_VALUE_OFFSET: usize = offset_of!(PmcOpPmcrw, pm_value);

/// A deliberately wrong layout: a stray field before `pm_value`.
#[cfg(feature = "selftest-wrong-offset")]
const PMCRW_VALUE_OFFSET: usize = {
    #[repr(C)]
    struct WrongPmcrw {
        pm_flags: u32,
        pm_pmcid: u32,
        stray: u64,
        pm_value: u64,
    }
    offset_of!(WrongPmcrw, pm_value)
};

/// `offsetof(struct pmclog_pmcdetach, pl_header)`; the selftest build has
/// a stray word in front of it.
#[cfg(not(feature = "selftest-wrong-offset"))]
const PMCDETACH_HEADER_OFFSET: usize = offset_of!(PmclogPmcdetach, pl_header);
#[cfg(feature = "selftest-wrong-offset")]
const PMCDETACH_HEADER_OFFSET: usize = 4;

/// Size of `union pmclog_entry`'s `pl_u`; the selftest build gives it the
/// size of another record.
#[cfg(not(feature = "selftest-wrong-offset"))]
const ENTRY_USERDATA_SIZE: usize = size_of::<PmclogUserdata>();
#[cfg(feature = "selftest-wrong-offset")]
const ENTRY_USERDATA_SIZE: usize = size_of::<PmclogProcexit>();

/// `offsetof(struct hwt_alloc, backend_name)`; the selftest build lays
/// the struct out on i386 as if its pointers were 64-bit.
#[cfg(not(all(feature = "selftest-wrong-offset", target_arch = "x86")))]
const HWT_ALLOC_BACKEND_OFFSET: usize = offset_of!(HwtAlloc, backend_name);
#[cfg(all(feature = "selftest-wrong-offset", target_arch = "x86"))]
const HWT_ALLOC_BACKEND_OFFSET: usize = 32;

const fn pmc_h(m: &mut Manifest) {
    constant!(m; PMC_NAME_MAX, PMC_CLASS_MAX, PMC_CPUID_LEN, PMC_VERSION_MAJOR, PMC_VERSION_PATCH,
        PMC_CALLCHAIN_DEPTH_MAX, PMC_CC_F_USERSPACE, PMC_ID_INVALID, PMC_CPU_ANY);
    expr!(m;
        "PMC_ID_MAKE_ID(0xABC, 3, 0x0F, 0x7E)" => pmc_id_make_id(0xABC, 3, 0x0F, 0x7E),
        "PMC_ID_MAKE_ID(0x1FFF, 0x1F, 0x1FF, 0x1FF)" => pmc_id_make_id(0x1FFF, 0x1F, 0x1FF, 0x1FF),
        "PMC_ID_TO_CPU(0xABC30F7E)" => pmc_id_to_cpu(0xABC3_0F7E),
        "PMC_ID_TO_MODE(0xABC30F7E)" => pmc_id_to_mode(0xABC3_0F7E),
        "PMC_ID_TO_CLASS(0xABC30F7E)" => pmc_id_to_class(0xABC3_0F7E),
        "PMC_ID_TO_ROWINDEX(0xABC30F7E)" => pmc_id_to_rowindex(0xABC3_0F7E),
        "PMC_CPU_FIRST" => PMC_CPU_FIRST.raw(),
        "PMC_CPU_LAST" => PMC_CPU_LAST.raw(),
        "PMC_STATE_FIRST" => PMC_STATE_FIRST.raw(),
        "PMC_STATE_LAST" => PMC_STATE_LAST.raw(),
        "PMC_MODE_FIRST" => PMC_MODE_FIRST.raw(),
        "PMC_MODE_LAST" => PMC_MODE_LAST.raw(),
        "PMC_DISP_FIRST" => PMC_DISP_FIRST.raw(),
        "PMC_DISP_LAST" => PMC_DISP_LAST.raw(),
        "PMC_CAP_FIRST" => PMC_CAP_FIRST.bits(),
        "PMC_CAP_LAST" => PMC_CAP_LAST.bits(),
        "PMC_CLASS_FIRST" => PMC_CLASS_FIRST.raw(),
        "PMC_IS_COUNTING_MODE(PMC_MODE_SC)" => PmcMode::Sc.is_counting() as i32,
        "PMC_IS_COUNTING_MODE(PMC_MODE_TS)" => PmcMode::Ts.is_counting() as i32,
        "PMC_IS_SYSTEM_MODE(PMC_MODE_SS)" => PmcMode::Ss.is_system() as i32,
        "PMC_IS_SYSTEM_MODE(PMC_MODE_TC)" => PmcMode::Tc.is_system() as i32,
        "PMC_IS_SAMPLING_MODE(PMC_MODE_TS)" => PmcMode::Ts.is_sampling() as i32,
        "PMC_IS_SAMPLING_MODE(PMC_MODE_SC)" => PmcMode::Sc.is_sampling() as i32,
        "PMC_IS_VIRTUAL_MODE(PMC_MODE_TC)" => PmcMode::Tc.is_virtual() as i32,
        "PMC_IS_VIRTUAL_MODE(PMC_MODE_SS)" => PmcMode::Ss.is_virtual() as i32,
    );
    expr!(m;
        "PMC_CAP_INTERRUPT" => PmcCaps::INTERRUPT.bits(),
        "PMC_CAP_USER" => PmcCaps::USER.bits(),
        "PMC_CAP_SYSTEM" => PmcCaps::SYSTEM.bits(),
        "PMC_CAP_EDGE" => PmcCaps::EDGE.bits(),
        "PMC_CAP_THRESHOLD" => PmcCaps::THRESHOLD.bits(),
        "PMC_CAP_READ" => PmcCaps::READ.bits(),
        "PMC_CAP_WRITE" => PmcCaps::WRITE.bits(),
        "PMC_CAP_INVERT" => PmcCaps::INVERT.bits(),
        "PMC_CAP_QUALIFIER" => PmcCaps::QUALIFIER.bits(),
        "PMC_CAP_PRECISE" => PmcCaps::PRECISE.bits(),
        "PMC_CAP_TAGGING" => PmcCaps::TAGGING.bits(),
        "PMC_CAP_CASCADE" => PmcCaps::CASCADE.bits(),
        "PMC_CAP_SYSWIDE" => PmcCaps::SYSWIDE.bits(),
        "PMC_CAP_DOMWIDE" => PmcCaps::DOMWIDE.bits(),
        "PMC_F_UNUSED1" => PmcFlags::UNUSED1.bits(),
        "PMC_F_DESCENDANTS" => PmcFlags::DESCENDANTS.bits(),
        "PMC_F_LOG_PROCCSW" => PmcFlags::LOG_PROCCSW.bits(),
        "PMC_F_LOG_PROCEXIT" => PmcFlags::LOG_PROCEXIT.bits(),
        "PMC_F_NEWVALUE" => PmcFlags::NEWVALUE.bits(),
        "PMC_F_OLDVALUE" => PmcFlags::OLDVALUE.bits(),
        "PMC_F_CALLCHAIN" => PmcFlags::CALLCHAIN.bits(),
        "PMC_F_USERCALLCHAIN" => PmcFlags::USERCALLCHAIN.bits(),
        "PMC_F_EV_PMU" => PmcFlags::EV_PMU.bits(),
        "PMC_F_ATTACHED_TO_OWNER" => PmcFlags::ATTACHED_TO_OWNER.bits(),
        "PMC_F_NEEDS_LOGFILE" => PmcFlags::NEEDS_LOGFILE.bits(),
        "PMC_F_ATTACH_DONE" => PmcFlags::ATTACH_DONE.bits(),
    );

    let mut i = 0;
    while i < PmcCputype::ALL.len() {
        let c = PmcCputype::ALL[i];
        m.addition = cputype_addition(c);
        m.push(CExpr::Name("PMC_CPU_", c.name()), c.raw() as u64, 4);
        i += 1;
    }
    i = 0;
    while i < PmcClass::ALL.len() {
        let c = PmcClass::ALL[i];
        m.addition = class_addition(c);
        m.push(CExpr::Name("PMC_CLASS_", c.name()), c.raw() as u64, 4);
        i += 1;
    }
    m.addition = None;
    i = 0;
    while i < PmcState::ALL.len() {
        let s = PmcState::ALL[i];
        m.push(CExpr::Name("PMC_STATE_", s.name()), s.raw() as u64, 4);
        i += 1;
    }
    i = 0;
    while i < PmcMode::ALL.len() {
        let s = PmcMode::ALL[i];
        m.push(CExpr::Name("PMC_MODE_", s.name()), s.raw() as u64, 4);
        i += 1;
    }
    i = 0;
    while i < PmcDisp::ALL.len() {
        let s = PmcDisp::ALL[i];
        m.push(CExpr::Name("PMC_DISP_", s.name()), s.raw() as u64, 4);
        i += 1;
    }
    i = 0;
    while i < PmcOp::ALL.len() {
        let s = PmcOp::ALL[i];
        m.addition = if matches!(s, PmcOp::Getcaps) {
            Some(&ADD_GETCAPS)
        } else {
            None
        };
        m.push(CExpr::Name("PMC_OP_", s.name()), s.raw() as u64, 4);
        i += 1;
    }

    m.addition = Some(&ADD_VERSION);
    constant!(m; PMC_VERSION_MINOR, PMC_VERSION);
    m.addition = Some(&ADD_RAPL);
    expr!(m; "PMC_CLASS_LAST" => PMC_CLASS_LAST.raw());
    m.addition = Some(&ADD_MULTIPART);
    constant!(m; PMC_CC_F_MULTIPART);
    m.addition = None;

    m.push(CExpr::Sizeof("pmc_id_t"), size_of::<PmcId>() as u64, 8);
    m.push(
        CExpr::Sizeof("pmc_value_t"),
        size_of::<PmcValue>() as u64,
        8,
    );
    layout!(m; "struct pmc_op_pmcallocate", PmcOpPmcallocate {
        pm_caps, pm_cpu, pm_class, pm_ev, pm_flags, pm_mode, pm_pmcid, pm_count, pm_md
    });
    layout!(m; "struct pmc_op_pmcadmin", PmcOpPmcadmin { pm_cpu, pm_flags, pm_pmc, pm_state });
    layout!(m; "struct pmc_op_pmcattach", PmcOpPmcattach { pm_pmc, pm_pid });
    layout!(m; "struct pmc_op_pmcsetcount", PmcOpPmcsetcount { pm_count, pm_pmcid });
    layout!(m; "struct pmc_op_pmcrw", PmcOpPmcrw { pm_flags, pm_pmcid } {
        "pm_value" => PMCRW_VALUE_OFFSET,
    });
    layout!(m; "struct pmc_info", PmcInfo {
        pm_name, pm_class, pm_enabled, pm_rowdisp, pm_ownerpid, pm_mode, pm_event, pm_flags, pm_reloadcount
    });
    layout!(m; "struct pmc_op_getpmcinfo", PmcOpGetpmcinfo { pm_cpu, pm_pmcs });
    layout!(m; "struct pmc_classinfo", PmcClassinfo { pm_class, pm_caps, pm_width, pm_num });
    layout!(m; "struct pmc_op_getcpuinfo", PmcOpGetcpuinfo { pm_cputype, pm_ncpu, pm_npmc, pm_nclass, pm_classes });
    layout!(m; "struct pmc_op_configurelog", PmcOpConfigurelog { pm_flags, pm_logfd });
    layout!(m; "struct pmc_op_getdriverstats", PmcOpGetdriverstats {
        pm_intr_ignored, pm_intr_processed, pm_intr_bufferfull, pm_syscalls, pm_syscall_errors,
        pm_buffer_requests, pm_buffer_requests_failed, pm_log_sweeps
    });
    layout!(m; "struct pmc_op_simple", PmcOpSimple { pm_pmcid });
    layout!(m; "struct pmc_op_writelog", PmcOpWritelog { pm_userdata });
    layout!(m; "struct pmc_op_getmsr", PmcOpGetmsr { pm_msr, pm_pmcid });
    layout!(m; "struct pmc_dyn_event_descr", PmcDynEventDescr { pm_ev_name, pm_ev_code });
    layout!(m; "struct pmc_op_getdyneventinfo", PmcOpGetdyneventinfo { pm_class, pm_nevent, pm_events });
    m.addition = Some(&ADD_GETCAPS);
    layout!(m; "struct pmc_op_caps", PmcOpCaps { pm_pmcid, pm_caps });
    m.addition = None;

    // Kernel-only defaults (the _KERNEL part of pmc.h).
    m.unit = Unit::Kernel;
    constant!(m; PMC_HASH_SIZE, PMC_MTXPOOL_SIZE, PMC_LOG_BUFFER_SIZE, PMC_NLOGBUFFERS_PCPU,
        PMC_NSAMPLES, PMC_CALLCHAIN_DEPTH, PMC_THREADLIST_MAX);
    m.unit = Unit::User;
}

const fn pmc_mdep_h(m: &mut Manifest) {
    use x86::*;
    m.targets = X86;
    constant!(m; PMC_MDEP_CLASS_INDEX_TSC, PMC_MDEP_CLASS_INDEX_K8, PMC_MDEP_CLASS_INDEX_IAP,
        PMC_MDEP_CLASS_INDEX_IAF, PMC_MDEP_CLASS_INDEX_UCP, PMC_MDEP_CLASS_INDEX_UCF,
        IAF_OS, IAF_USR, IAF_ANY, IAF_PMI, IAP_USR, IAP_OS, IAP_EDGE, IAP_INT, IAP_ANY, IAP_EN,
        IAP_INV, UCF_EN, UCF_PMI, UCP_CTRR, UCP_EDGE, UCP_INT, UCP_EN, UCP_INV,
        AMD_PMC_INVERT, AMD_PMC_ENABLE, AMD_PMC_INT, AMD_PMC_PC, AMD_PMC_EDGE, AMD_PMC_OS,
        AMD_PMC_USR, AMD_PMC_COUNTERMASK, AMD_PMC_UNITMASK, AMD_PMC_EVENTMASK, AMD_NPMCS,
        AMD_CORE_NPMCS);
    expr!(m;
        "IAP_EVSEL(0x1234)" => iap_evsel(0x1234),
        "IAP_UMASK(0x1234)" => iap_umask(0x1234),
        "IAP_CMASK(0x1234)" => iap_cmask(0x1234),
        "PMC_AMD_SUB_CLASS_CORE" => AmdSubClass::Core as u32,
        "PMC_AMD_SUB_CLASS_L3_CACHE" => AmdSubClass::L3Cache as u32,
        "PMC_AMD_SUB_CLASS_DATA_FABRIC" => AmdSubClass::DataFabric as u32,
    );
    m.targets = AMD64;
    constant!(m; PMC_MDEP_CLASS_INDEX_P4);
    m.targets = I386;
    constant!(m; PMC_MDEP_CLASS_INDEX_K7);
    m.targets = X86;
    layout!(m; "struct pmc_md_amd_op_pmcallocate", PmcMdAmdOpPmcallocate { pm_amd_config, pm_amd_sub_class });
    layout!(m; "struct pmc_md_iap_op_pmcallocate", PmcMdIapOpPmcallocate { pm_iap_config, pm_iap_rsp });
    layout!(m; "struct pmc_md_ucf_op_pmcallocate", PmcMdUcfOpPmcallocate { pm_ucf_flags });
    layout!(m; "struct pmc_md_ucp_op_pmcallocate", PmcMdUcpOpPmcallocate { pm_ucp_config });
    layout!(m; "union pmc_md_op_pmcallocate", x86::PmcMdOpPmcallocate { pm_amd, pm_iap, pm_ucf, pm_ucp, __pad });
    m.addition = Some(&ADD_IBS);
    layout!(m; "struct pmc_md_ibs_op_pmcallocate", PmcMdIbsOpPmcallocate { ibs_flag, ibs_type, ibs_ctl, ibs_ctl2 });
    layout!(m; "union pmc_md_op_pmcallocate", x86::PmcMdOpPmcallocate {} {
        "pm_ibs" => offset_of!(x86::PmcMdOpPmcallocate, pm_ibs),
    });
    m.addition = None;

    use arm64::*;
    m.targets = ARM64;
    constant!(m; PMC_MDEP_CLASS_INDEX_ARMV8, PMC_MDEP_CLASS_INDEX_DMC620_CD2,
        PMC_MDEP_CLASS_INDEX_DMC620_C, PMC_MDEP_CLASS_INDEX_CMN600);
    layout!(m; "struct pmc_md_cmn600_pmu_op_pmcallocate", PmcMdCmn600PmuOpPmcallocate {
        pma_cmn600_nodeid, pma_cmn600_occupancy, pma_cmn600_config
    });
    layout!(m; "struct pmc_md_dmc620_pmu_op_pmcallocate", PmcMdDmc620PmuOpPmcallocate {
        pm_dmc620_match, pm_dmc620_mask, pm_dmc620_config
    });
    layout!(m; "union pmc_md_op_pmcallocate", arm64::PmcMdOpPmcallocate { pm_cmn600, pm_dmc620, __pad } {
        "pm_md_config" => offset_of!(arm64::PmcMdOpPmcallocate, pm_armv8)
            + offset_of!(PmcMdArmv8OpPmcallocate, pm_md_config),
    });
    m.addition = Some(&ADD_ARM64_FLAGS);
    layout!(m; "union pmc_md_op_pmcallocate", arm64::PmcMdOpPmcallocate {} {
        "pm_md_flags" => offset_of!(arm64::PmcMdOpPmcallocate, pm_armv8)
            + offset_of!(PmcMdArmv8OpPmcallocate, pm_md_flags),
    });
    constant!(m; PM_MD_RAW_EVENT);
    m.addition = None;
    m.targets = ALL;
}

const fn pmc_events_h(m: &mut Manifest) {
    constant!(m; PMC_EV_DYN_COUNT, PMC_EV_SOFT_FIRST, PMC_EV_SOFT_LAST, PMC_EVENT_FIRST, PMC_EVENT_LAST,
        PMC_EV_TSC_FIRST, PMC_EV_TSC_LAST, PMC_EV_K8_FIRST, PMC_EV_K8_LAST, PMC_EV_IAF_FIRST,
        PMC_EV_IAF_LAST, PMC_EV_ARMV7_FIRST, PMC_EV_ARMV7_LAST, PMC_EV_ARMV8_FIRST, PMC_EV_ARMV8_LAST,
        PMC_EV_PPC7450_FIRST, PMC_EV_PPC7450_LAST, PMC_EV_PPC970_FIRST, PMC_EV_PPC970_LAST,
        PMC_EV_E500_FIRST, PMC_EV_E500_LAST, PMC_EV_DMC620_PMU_CD2_FIRST,
        PMC_EV_DMC620_PMU_CD2_LAST, PMC_EV_DMC620_PMU_C_FIRST, PMC_EV_DMC620_PMU_C_LAST,
        PMC_EV_CMN600_PMU_FIRST, PMC_EV_CMN600_PMU_LAST);
    let mut i = 0;
    while i < PMC_EVENT_CODES.len() {
        let (name, code) = PMC_EVENT_CODES[i];
        m.push(CExpr::Name("", name), code as u64, 4);
        i += 1;
    }
    // `__PMC_EV_BLOCK(C, V)` is the enumerator PMC_EV_C__BLOCK_START = V - 1.
    i = 0;
    while i < PMC_EVENT_BLOCKS.len() {
        let b = PMC_EVENT_BLOCKS[i];
        m.push(CExpr::BlockStart(b.class), BLOCK_FIRST(b) as u64 - 1, 4);
        i += 1;
    }
}

/// The first code of an event block (a selftest moves one).
#[allow(non_snake_case)]
const fn BLOCK_FIRST(b: PmcEventBlock) -> u32 {
    #[cfg(feature = "selftest-wrong-offset")]
    if b.first == 0x14600 {
        return 0x14610;
    }
    b.first
}

const fn pmclog_h(m: &mut Manifest) {
    constant!(m; PMCLOG_HEADER_MAGIC);
    expr!(m;
        "PMCLOG_HEADER_TO_LENGTH(0xEE0D0018)" => pmclog_header_to_length(0xEE0D_0018),
        "PMCLOG_HEADER_TO_TYPE(0xEE0D0018)" => pmclog_header_to_type(0xEE0D_0018),
        "PMCLOG_HEADER_TO_MAGIC(0xEE0D0018)" => pmclog_header_to_magic(0xEE0D_0018),
        "PMCLOG_HEADER_CHECK_MAGIC(0xEF0D0018)" => pmclog_header_check_magic(0xEF0D_0018) as i32,
        "PMC_CALLCHAIN_TO_CPUFLAGS(5, 0x10001)" => pmc_callchain_to_cpuflags(5, 0x10001),
        "PMC_CALLCHAIN_CPUFLAGS_TO_CPU(0x50001)" => pmc_callchain_cpuflags_to_cpu(0x50001),
        "PMC_CALLCHAIN_CPUFLAGS_TO_USERMODE(0x50003)" => pmc_callchain_cpuflags_to_usermode(0x50003),
    );
    let mut i = 0;
    while i < PmclogType::ALL.len() {
        let t = PmclogType::ALL[i];
        m.push(CExpr::Name("PMCLOG_TYPE_", t.name()), t.raw() as u64, 4);
        i += 1;
    }
    layout!(m; "struct timespec", Timespec { tv_sec, tv_nsec });
    // Every record starts with PMCLOG_ENTRY_HEADER (pl_header, pl_spare,
    // pl_tsc).
    layout!(m; "struct pmclog_header", PmclogHeader { pl_header, pl_spare, pl_tsc });
    layout!(m; "struct pmclog_callchain", PmclogCallchain {
        pl_header, pl_spare, pl_tsc, pl_pid, pl_tid, pl_pmcid, pl_cpuflags, pl_pc
    });
    layout!(m; "struct pmclog_closelog", PmclogCloselog { pl_header, pl_spare, pl_tsc });
    layout!(m; "struct pmclog_dropnotify", PmclogDropnotify { pl_header, pl_spare, pl_tsc });
    layout!(m; "struct pmclog_initialize", PmclogInitialize {
        pl_header, pl_spare, pl_tsc, pl_version, pl_cpu, pl_tsc_freq, pl_ts, pl_cpuid
    });
    layout!(m; "struct pmclog_map_in", PmclogMapIn {
        pl_header, pl_spare, pl_tsc, pl_pid, pl_pad, pl_start, pl_pathname
    });
    layout!(m; "struct pmclog_map_out", PmclogMapOut {
        pl_header, pl_spare, pl_tsc, pl_pid, pl_pad, pl_start, pl_end
    });
    layout!(m; "struct pmclog_pmcallocate", PmclogPmcallocate {
        pl_header, pl_spare, pl_tsc, pl_pmcid, pl_event, pl_flags, pl_pad, pl_rate
    });
    layout!(m; "struct pmclog_pmcattach", PmclogPmcattach {
        pl_header, pl_spare, pl_tsc, pl_pmcid, pl_pid, pl_pathname
    });
    layout!(m; "struct pmclog_pmcdetach", PmclogPmcdetach { pl_spare, pl_tsc, pl_pmcid, pl_pid } {
        "pl_header" => PMCDETACH_HEADER_OFFSET,
    });
    layout!(m; "struct pmclog_proccsw", PmclogProccsw {
        pl_header, pl_spare, pl_tsc, pl_value, pl_pmcid, pl_pid, pl_tid, pl_pad
    });
    layout!(m; "struct pmclog_proccreate", PmclogProccreate {
        pl_header, pl_spare, pl_tsc, pl_pid, pl_flags, pl_pcomm
    });
    layout!(m; "struct pmclog_procexec", PmclogProcexec {
        pl_header, pl_spare, pl_tsc, pl_pid, pl_pmcid, pl_base, pl_dyn, pl_pathname
    });
    layout!(m; "struct pmclog_procexit", PmclogProcexit {
        pl_header, pl_spare, pl_tsc, pl_pmcid, pl_pid, pl_value
    });
    layout!(m; "struct pmclog_procfork", PmclogProcfork {
        pl_header, pl_spare, pl_tsc, pl_oldpid, pl_newpid
    });
    layout!(m; "struct pmclog_sysexit", PmclogSysexit { pl_header, pl_spare, pl_tsc, pl_pid, pl_pad });
    layout!(m; "struct pmclog_threadcreate", PmclogThreadcreate {
        pl_header, pl_spare, pl_tsc, pl_tid, pl_pid, pl_flags, pl_pad, pl_tdname
    });
    layout!(m; "struct pmclog_threadexit", PmclogThreadexit { pl_header, pl_spare, pl_tsc, pl_tid, pl_pad });
    layout!(m; "struct pmclog_userdata", PmclogUserdata {
        pl_header, pl_spare, pl_tsc, pl_userdata, pl_pad
    });
    layout!(m; "struct pmclog_pmcallocatedyn", PmclogPmcallocatedyn {
        pl_header, pl_spare, pl_tsc, pl_pmcid, pl_event, pl_flags, pl_pad, pl_evname
    });
    // The union of every record: its size, alignment, members, and each
    // member's size (which names the member's type).
    layout!(m; "union pmclog_entry", PmclogEntry {
        pl_cc, pl_cl, pl_dn, pl_i, pl_mi, pl_mo, pl_a, pl_ad, pl_t, pl_d, pl_c, pl_pc, pl_x,
        pl_e, pl_f, pl_se, pl_tc, pl_te, pl_u
    });
    member_sizes!(m; "union pmclog_entry",
        "pl_cc" => PmclogCallchain, "pl_cl" => PmclogCloselog, "pl_dn" => PmclogDropnotify,
        "pl_i" => PmclogInitialize, "pl_mi" => PmclogMapIn, "pl_mo" => PmclogMapOut,
        "pl_a" => PmclogPmcallocate, "pl_ad" => PmclogPmcallocatedyn, "pl_t" => PmclogPmcattach,
        "pl_d" => PmclogPmcdetach, "pl_c" => PmclogProccsw, "pl_pc" => PmclogProccreate,
        "pl_x" => PmclogProcexec, "pl_e" => PmclogProcexit, "pl_f" => PmclogProcfork,
        "pl_se" => PmclogSysexit, "pl_tc" => PmclogThreadcreate, "pl_te" => PmclogThreadexit,
    );
    m.push(
        CExpr::MemberSize("union pmclog_entry", "pl_u"),
        ENTRY_USERDATA_SIZE as u64,
        8,
    );
    expr!(m; "sizeof(union pmclog_entry)" => PMCLOG_MAX_RECORD);
}

const fn pmckern_h(m: &mut Manifest) {
    constant!(m; PMC_FN_PROCESS_EXEC, PMC_FN_CSW_IN, PMC_FN_CSW_OUT, PMC_FN_DO_SAMPLES,
        PMC_FN_UNUSED1, PMC_FN_UNUSED2, PMC_FN_MMAP, PMC_FN_MUNMAP, PMC_FN_USER_CALLCHAIN,
        PMC_FN_USER_CALLCHAIN_SOFT, PMC_FN_SOFT_SAMPLING, PMC_FN_THR_CREATE, PMC_FN_THR_EXIT,
        PMC_FN_THR_USERRET, PMC_FN_THR_CREATE_LOG, PMC_FN_THR_EXIT_LOG, PMC_FN_PROC_CREATE_LOG);
    expr!(m;
        "PMC_HR" => RingType::Hr as u32,
        "PMC_SR" => RingType::Sr as u32,
        "PMC_UR" => RingType::Ur as u32,
        "PMC_NUM_SR" => PMC_NUM_SR as u32,
    );
    m.push(
        CExpr::Sizeof("ring_type_t"),
        size_of::<RingType>() as u64,
        8,
    );
    layout!(m; "struct pmckern_procexec", PmckernProcexec { pm_credentialschanged, pm_baseaddr, pm_dynaddr });
    layout!(m; "struct pmckern_map_in", PmckernMapIn { pm_file, pm_address });
    layout!(m; "struct pmckern_map_out", PmckernMapOut { pm_address, pm_size });
    layout!(m; "struct pmckern_soft", PmckernSoft { pm_ev, pm_cpu, pm_tf });
}

const fn hwt_h(m: &mut Manifest) {
    let mut i = 0;
    while i < HwtRecordType::ALL.len() {
        let t = HwtRecordType::ALL[i];
        m.push(CExpr::Name("HWT_RECORD_", t.name()), t.raw() as u64, 4);
        i += 1;
    }
    // hwt(4)'s driver is built on amd64 and arm64, but its header is the
    // same everywhere: compared on i386 too, where pointers are 32-bit.
    constant!(m; HWT_MAGIC, HWT_BACKEND_MAXNAMELEN, HWT_MODE_THREAD, HWT_MODE_CPU,
        HWT_IOC_ALLOC, HWT_IOC_START, HWT_IOC_STOP, HWT_IOC_RECORD_GET, HWT_IOC_BUFPTR_GET,
        HWT_IOC_SET_CONFIG, HWT_IOC_WAKEUP, HWT_IOC_SVC_BUF);
    layout!(m; "struct hwt_alloc", HwtAlloc {
        bufsize, mode, pid, cpu_map, cpusetsize, ident, kqueue_fd
    } {
        "backend_name" => HWT_ALLOC_BACKEND_OFFSET,
    });
    layout!(m; "struct hwt_start", HwtStart { reserved });
    layout!(m; "struct hwt_stop", HwtStop { reserved });
    layout!(m; "struct hwt_wakeup", HwtWakeup { reserved });
    layout!(m; "struct hwt_record_user_entry", HwtRecordUserEntry { record_type } {
        "fullpath" => offset_of!(HwtRecordUserEntry, u) + offset_of!(HwtRecordObject, fullpath),
        "addr" => offset_of!(HwtRecordUserEntry, u) + offset_of!(HwtRecordObject, addr),
        "baseaddr" => offset_of!(HwtRecordUserEntry, u) + offset_of!(HwtRecordObject, baseaddr),
        "buf_id" => offset_of!(HwtRecordUserEntry, u) + offset_of!(HwtRecordBuffer, buf_id),
        "curpage" => offset_of!(HwtRecordUserEntry, u) + offset_of!(HwtRecordBuffer, curpage),
        "offset" => offset_of!(HwtRecordUserEntry, u) + offset_of!(HwtRecordBuffer, offset),
        "thread_id" => offset_of!(HwtRecordUserEntry, u) + offset_of!(HwtRecordPayload, thread_id),
    });
    layout!(m; "struct hwt_record_get", HwtRecordGet { records, nentries, wait });
    layout!(m; "struct hwt_bufptr_get", HwtBufptrGet { ident, offset, data });
    layout!(m; "struct hwt_set_config", HwtSetConfig { pause_on_mmap, config, config_size, config_version });
    layout!(m; "struct hwt_svc_buf", HwtSvcBuf { data, data_size, data_version });
    m.targets = ALL;
}

const fn exterr_h(m: &mut Manifest) {
    use uapi::exterr::*;
    constant!(m; UEXTERROR_MAXLEN, UEXTERROR_VER, EXTERRCTL_ENABLE, EXTERRCTL_DISABLE, EXTERRCTL_UD,
        EXTERRCTLF_FORCE);
    layout!(m; "struct uexterror", Uexterror {
        ver, error, cat, src_line, flags, rsrv0, p1, p2, rsrv1, msg
    });
    m.addition = Some(&ADD_EXTERR_CATS);
    constant!(m; EXTERR_CAT_HWPMC_IBS, EXTERR_CAT_HWPMC_AMD, EXTERR_CAT_HWPMC_MOD);
    m.addition = None;
}

const fn build() -> Manifest {
    let mut m = Manifest::new();
    pmc_h(&mut m);
    pmc_mdep_h(&mut m);
    pmc_events_h(&mut m);
    pmclog_h(&mut m);
    pmckern_h(&mut m);
    hwt_h(&mut m);
    exterr_h(&mut m);
    m
}

/// The manifest, evaluated for the target being compiled.
pub const MANIFEST: Manifest = build();

/// The Rust values, read from the object file built for each target.
// SAFETY: a name only abi-check reads from the object file; nothing else defines it.
#[unsafe(no_mangle)]
#[used]
pub static UAPI_ABI_VALUES: [u64; CAPACITY] = MANIFEST.values();

/// Number of valid entries of [`UAPI_ABI_VALUES`].
// SAFETY: a name only abi-check reads from the object file; nothing else defines it.
#[unsafe(no_mangle)]
#[used]
pub static UAPI_ABI_COUNT: u64 = MANIFEST.len as u64;

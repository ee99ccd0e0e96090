//! `machine/pmc_mdep.h` and the machine-dependent allocation structs of the
//! `dev/hwpmc` headers.
//!
//! Both layouts are always defined, so that tools on any host can build and
//! check them; [`PmcMdOpPmcallocate`] is the one of the machine compiled
//! for.

use crate::plain::impl_plain;

/// x86 (amd64 and i386): `hwpmc_amd.h`, `hwpmc_core.h`, `hwpmc_uncore.h`,
/// `hwpmc_ibs.h` and the x86 `pmc_mdep.h`.
pub mod x86 {
    use super::impl_plain;

    /// `PMC_MDEP_CLASS_INDEX_TSC`.
    pub const PMC_MDEP_CLASS_INDEX_TSC: u32 = 1;
    /// `PMC_MDEP_CLASS_INDEX_K7` (i386 only).
    pub const PMC_MDEP_CLASS_INDEX_K7: u32 = 2;
    /// `PMC_MDEP_CLASS_INDEX_K8`.
    pub const PMC_MDEP_CLASS_INDEX_K8: u32 = 2;
    /// `PMC_MDEP_CLASS_INDEX_P4`.
    pub const PMC_MDEP_CLASS_INDEX_P4: u32 = 2;
    /// `PMC_MDEP_CLASS_INDEX_IAP`.
    pub const PMC_MDEP_CLASS_INDEX_IAP: u32 = 2;
    /// `PMC_MDEP_CLASS_INDEX_IAF`.
    pub const PMC_MDEP_CLASS_INDEX_IAF: u32 = 3;
    /// `PMC_MDEP_CLASS_INDEX_UCP`.
    pub const PMC_MDEP_CLASS_INDEX_UCP: u32 = 4;
    /// `PMC_MDEP_CLASS_INDEX_UCF`.
    pub const PMC_MDEP_CLASS_INDEX_UCF: u32 = 5;

    /// `struct pmc_md_amd_op_pmcallocate`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct PmcMdAmdOpPmcallocate {
        /// PERF_CTL value (event select, unit mask, qualifiers).
        pub pm_amd_config: u64,
        /// [`AmdSubClass`] as a raw value.
        pub pm_amd_sub_class: u32,
    }

    /// `enum sub_class` of `hwpmc_amd.h`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(u32)]
    pub enum AmdSubClass {
        /// Core counters.
        Core = 0,
        /// L3 cache counters.
        L3Cache = 1,
        /// Data fabric counters.
        DataFabric = 2,
    }

    /// `struct pmc_md_ibs_op_pmcallocate` (2026).
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct PmcMdIbsOpPmcallocate {
        /// IBS flags.
        pub ibs_flag: u32,
        /// [`IBS_PMC_FETCH`] or [`IBS_PMC_OP`].
        pub ibs_type: u32,
        /// IBS control register value.
        pub ibs_ctl: u64,
        /// Second IBS control register value.
        pub ibs_ctl2: u64,
    }
    /// IBS fetch sampling.
    pub const IBS_PMC_FETCH: u32 = 0;
    /// IBS op sampling.
    pub const IBS_PMC_OP: u32 = 1;
    /// Rows of the IBS class.
    pub const IBS_NPMCS: u32 = 2;

    /// `struct pmc_md_iap_op_pmcallocate`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct PmcMdIapOpPmcallocate {
        /// IA32_PERFEVTSELx value.
        pub pm_iap_config: u64,
        /// Off-core response MSR value.
        pub pm_iap_rsp: u64,
    }

    /// `struct pmc_md_ucf_op_pmcallocate`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct PmcMdUcfOpPmcallocate {
        /// `UCF_*` flags.
        pub pm_ucf_flags: u16,
    }

    /// `struct pmc_md_ucp_op_pmcallocate`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct PmcMdUcpOpPmcallocate {
        /// Uncore event select value.
        pub pm_ucp_config: u64,
    }

    /// `union pmc_md_op_pmcallocate` of amd64 and i386.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub union PmcMdOpPmcallocate {
        /// AMD core, L3 and data fabric counters.
        pub pm_amd: PmcMdAmdOpPmcallocate,
        /// AMD IBS.
        pub pm_ibs: PmcMdIbsOpPmcallocate,
        /// Intel programmable counters.
        pub pm_iap: PmcMdIapOpPmcallocate,
        /// Intel uncore fixed counters.
        pub pm_ucf: PmcMdUcfOpPmcallocate,
        /// Intel uncore programmable counters.
        pub pm_ucp: PmcMdUcpOpPmcallocate,
        /// Fixes the size at 32 bytes.
        pub __pad: [u64; 4],
    }

    impl PmcMdOpPmcallocate {
        /// The Intel view (`pm_iap`), which IAP and IAF requests use.
        pub fn iap(&self) -> PmcMdIapOpPmcallocate {
            // SAFETY: every member is plain integers within the 32 bytes
            // of `__pad`, so any bytes are a valid value of each.
            unsafe { self.pm_iap }
        }
        /// The AMD view (`pm_amd`).
        pub fn amd(&self) -> PmcMdAmdOpPmcallocate {
            // SAFETY: as in `iap`.
            unsafe { self.pm_amd }
        }
    }

    impl_plain!(
        PmcMdAmdOpPmcallocate,
        PmcMdIbsOpPmcallocate,
        PmcMdIapOpPmcallocate,
        PmcMdUcfOpPmcallocate,
        PmcMdUcpOpPmcallocate,
        PmcMdOpPmcallocate,
    );

    // IAF (fixed counter) control bits.
    /// Count in ring 0.
    pub const IAF_OS: u32 = 0x1;
    /// Count in ring 3.
    pub const IAF_USR: u32 = 0x2;
    /// Count for any thread of the core.
    pub const IAF_ANY: u32 = 0x4;
    /// Interrupt on overflow.
    pub const IAF_PMI: u32 = 0x8;

    // IAP (IA32_PERFEVTSELx) fields.
    /// Event select field.
    pub const fn iap_evsel(c: u64) -> u64 {
        c & 0xFF
    }
    /// Unit mask field.
    pub const fn iap_umask(c: u64) -> u64 {
        (c & 0xFF) << 8
    }
    /// Count in user mode.
    pub const IAP_USR: u64 = 1 << 16;
    /// Count in kernel mode.
    pub const IAP_OS: u64 = 1 << 17;
    /// Edge detect.
    pub const IAP_EDGE: u64 = 1 << 18;
    /// Interrupt on overflow.
    pub const IAP_INT: u64 = 1 << 20;
    /// Any thread of the core.
    pub const IAP_ANY: u64 = 1 << 21;
    /// Enable.
    pub const IAP_EN: u64 = 1 << 22;
    /// Invert the counter mask comparison.
    pub const IAP_INV: u64 = 1 << 23;
    /// Counter mask field.
    pub const fn iap_cmask(c: u64) -> u64 {
        (c & 0xFF) << 24
    }

    /// Uncore fixed counter: enable.
    pub const UCF_EN: u16 = 0x1;
    /// Uncore fixed counter: interrupt on overflow.
    pub const UCF_PMI: u16 = 0x4;
    /// Uncore programmable: reset the counter.
    pub const UCP_CTRR: u64 = 1 << 17;
    /// Uncore programmable: edge detect.
    pub const UCP_EDGE: u64 = 1 << 18;
    /// Uncore programmable: interrupt on overflow.
    pub const UCP_INT: u64 = 1 << 20;
    /// Uncore programmable: enable.
    pub const UCP_EN: u64 = 1 << 22;
    /// Uncore programmable: invert.
    pub const UCP_INV: u64 = 1 << 23;

    // AMD PERF_CTL bits.
    /// Invert the counter mask comparison.
    pub const AMD_PMC_INVERT: u64 = 1 << 23;
    /// Enable.
    pub const AMD_PMC_ENABLE: u64 = 1 << 22;
    /// Interrupt on overflow.
    pub const AMD_PMC_INT: u64 = 1 << 20;
    /// Pin control.
    pub const AMD_PMC_PC: u64 = 1 << 19;
    /// Edge detect.
    pub const AMD_PMC_EDGE: u64 = 1 << 18;
    /// Count in kernel mode.
    pub const AMD_PMC_OS: u64 = 1 << 17;
    /// Count in user mode.
    pub const AMD_PMC_USR: u64 = 1 << 16;
    /// Counter mask field.
    pub const AMD_PMC_COUNTERMASK: u64 = 0xFF00_0000;
    /// Unit mask field.
    pub const AMD_PMC_UNITMASK: u64 = 0xFF00;
    /// Event select field (bits 7:0 and 35:32).
    pub const AMD_PMC_EVENTMASK: u64 = 0xF_0000_00FF;
    /// Rows of the AMD class (core, L3 and data fabric).
    pub const AMD_NPMCS: u32 = 16;
    /// Core counter rows.
    pub const AMD_CORE_NPMCS: u32 = 6;
}

/// arm64: `hwpmc_arm64.h`, `hwpmc_cmn600.h`, `hwpmc_dmc620.h` and the
/// arm64 `pmc_mdep.h`.
pub mod arm64 {
    use super::impl_plain;

    /// `PMC_MDEP_CLASS_INDEX_ARMV8`.
    pub const PMC_MDEP_CLASS_INDEX_ARMV8: u32 = 1;
    /// `PMC_MDEP_CLASS_INDEX_DMC620_CD2`.
    pub const PMC_MDEP_CLASS_INDEX_DMC620_CD2: u32 = 2;
    /// `PMC_MDEP_CLASS_INDEX_DMC620_C`.
    pub const PMC_MDEP_CLASS_INDEX_DMC620_C: u32 = 3;
    /// `PMC_MDEP_CLASS_INDEX_CMN600`.
    pub const PMC_MDEP_CLASS_INDEX_CMN600: u32 = 4;

    /// The anonymous ARMv8 member of the arm64 union.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct PmcMdArmv8OpPmcallocate {
        /// PMEVTYPER event number.
        pub pm_md_config: u32,
        /// `PM_MD_*` flags (2026).
        pub pm_md_flags: u32,
    }
    /// `pm_md_config` is a raw event number, not a libpmc index (2026).
    pub const PM_MD_RAW_EVENT: u32 = 0x1;

    /// `struct pmc_md_cmn600_pmu_op_pmcallocate`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct PmcMdCmn600PmuOpPmcallocate {
        /// Mesh node.
        pub pma_cmn600_nodeid: u64,
        /// Occupancy filter.
        pub pma_cmn600_occupancy: u64,
        /// Event configuration.
        pub pma_cmn600_config: u32,
    }

    /// `struct pmc_md_dmc620_pmu_op_pmcallocate`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct PmcMdDmc620PmuOpPmcallocate {
        /// Match value.
        pub pm_dmc620_match: u64,
        /// Mask value.
        pub pm_dmc620_mask: u64,
        /// Event configuration.
        pub pm_dmc620_config: u32,
    }

    /// `union pmc_md_op_pmcallocate` of arm64.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub union PmcMdOpPmcallocate {
        /// ARMv8 core counters (an anonymous struct in C).
        pub pm_armv8: PmcMdArmv8OpPmcallocate,
        /// CMN-600 mesh counters.
        pub pm_cmn600: PmcMdCmn600PmuOpPmcallocate,
        /// DMC-620 memory controller counters.
        pub pm_dmc620: PmcMdDmc620PmuOpPmcallocate,
        /// Fixes the size at 32 bytes.
        pub __pad: [u64; 4],
    }

    impl_plain!(
        PmcMdArmv8OpPmcallocate,
        PmcMdCmn600PmuOpPmcallocate,
        PmcMdDmc620PmuOpPmcallocate,
        PmcMdOpPmcallocate,
    );
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
pub use x86::PmcMdOpPmcallocate;

#[cfg(target_arch = "aarch64")]
pub use arm64::PmcMdOpPmcallocate;

#[cfg(not(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64")))]
compile_error!("uapi: hwpmc has no machine-dependent layout for this architecture");

// A union's active member is not known, and bytes outside a smaller member
// may be uninitialised, so Debug shows no contents.
impl core::fmt::Debug for x86::PmcMdOpPmcallocate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PmcMdOpPmcallocate").finish_non_exhaustive()
    }
}

impl core::fmt::Debug for arm64::PmcMdOpPmcallocate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PmcMdOpPmcallocate").finish_non_exhaustive()
    }
}

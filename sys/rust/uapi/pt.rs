//! `sys/amd64/pt/pt.h`: the Intel PT configuration hwt(8) passes with
//! `HWT_IOC_SET_CONFIG` to the "pt" backend (amd64 only).
//!
//! FreeBSD does not install this header, so its layout is pinned by the
//! assertions at the end of this file (sizes and offsets from FreeBSD's
//! pt.h) rather than by the header comparison of `tools/abi-check`.

use crate::plain::impl_plain;

/// Most address ranges the backend can filter on.
pub const PT_IP_FILTER_MAX_RANGES: usize = 2;

/// One instruction-pointer filter range.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PtIpRange {
    /// First address.
    pub start: usize,
    /// Last address.
    pub end: usize,
}

/// `struct pt_cpu_config`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PtCpuConfig {
    /// IA32_RTIT_CTL bits the user asks for (masked by the backend).
    pub rtit_ctl: u64,
    /// CR3 to filter on (`register_t`; unused by FreeBSD's backend).
    pub cr3_filter: i64,
    /// Valid entries of `ip_ranges`; 0 disables filtering.
    pub nranges: i32,
    /// Address filter ranges.
    pub ip_ranges: [PtIpRange; PT_IP_FILTER_MAX_RANGES],
    /// MTC packet frequency.
    pub mtc_freq: u32,
    /// Cycle packet threshold.
    pub cyc_thresh: u32,
    /// PSB packet frequency.
    pub psb_freq: u32,
}

impl_plain!(PtIpRange, PtCpuConfig);

// IA32_RTIT_CTL bits (Intel SDM vol. 3, 33.2.7.2).
/// Tracing enabled.
pub const RTIT_CTL_TRACEEN: u64 = 1 << 0;
/// Trace ring 0.
pub const RTIT_CTL_OS: u64 = 1 << 2;
/// Trace ring > 0.
pub const RTIT_CTL_USER: u64 = 1 << 3;
/// Filter on CR3.
pub const RTIT_CTL_CR3FILTER: u64 = 1 << 7;
/// Output to a table of physical addresses.
pub const RTIT_CTL_TOPA: u64 = 1 << 8;
/// Emit MTC packets.
pub const RTIT_CTL_MTCEN: u64 = 1 << 9;
/// Emit TSC packets.
pub const RTIT_CTL_TSCEN: u64 = 1 << 10;
/// Disable return compression.
pub const RTIT_CTL_DISRETC: u64 = 1 << 11;
/// Emit COFI packets.
pub const RTIT_CTL_BRANCHEN: u64 = 1 << 13;

#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<PtCpuConfig>() == 72 && align_of::<PtCpuConfig>() == 8);
    assert!(offset_of!(PtCpuConfig, cr3_filter) == 8);
    assert!(offset_of!(PtCpuConfig, nranges) == 16);
    assert!(offset_of!(PtCpuConfig, ip_ranges) == 24);
    assert!(offset_of!(PtCpuConfig, mtc_freq) == 56);
    assert!(offset_of!(PtCpuConfig, cyc_thresh) == 60);
    assert!(offset_of!(PtCpuConfig, psb_freq) == 64);
};

//! `sys/arm64/coresight/etm4x.h`: the ETMv4 configuration passed to the
//! "coresight" backend with `HWT_IOC_SET_CONFIG`.
//!
//! FreeBSD does not install this header; the layout is pinned by the
//! assertions at the end of this file.

use crate::plain::impl_plain;

/// `config_version` the backend accepts; any other makes it fall back to
/// its built-in configuration.
pub const ETMV4_CONFIG_VERSION: i32 = 1;

/// `struct etmv4_config`: the trace unit's programming, register by register.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // fields are named after the ETMv4 registers
pub struct Etmv4Config {
    pub mode: u32,
    pub pe_sel: u32,
    pub cfg: u32,
    pub eventctrl0: u32,
    pub eventctrl1: u32,
    pub stall_ctrl: u32,
    pub ts_ctrl: u32,
    pub syncfreq: u32,
    pub ccctlr: u32,
    pub bb_ctrl: u32,
    pub vinst_ctrl: u32,
    pub viiectlr: u32,
    pub vissctlr: u32,
    pub vipcssctlr: u32,
    pub seq_idx: u8,
    pub seq_ctrl: [u32; 4],
    pub seq_rst: u32,
    pub seq_state: u32,
    pub cntr_idx: u8,
    pub cntrldvr: [u32; 4],
    pub cntr_ctrl: [u32; 4],
    pub cntr_val: [u32; 4],
    pub res_idx: u8,
    pub res_ctrl: [u32; 32],
    pub ss_idx: u8,
    pub ss_ctrl: [u32; 8],
    pub ss_status: [u32; 8],
    pub ss_pe_cmp: [u32; 8],
    pub addr_idx: u8,
    pub addr_val: [u64; 16],
    pub addr_acc: [u64; 16],
    pub addr_type: [u8; 16],
    pub ctxid_idx: u8,
    pub ctxid_pid: [u64; 8],
    pub ctxid_mask0: u32,
    pub ctxid_mask1: u32,
    pub vmid_idx: u8,
    pub vmid_val: [u64; 8],
    pub vmid_mask0: u32,
    pub vmid_mask1: u32,
    pub ext_inp: u32,
    pub s_ex_level: u8,
}

impl_plain!(Etmv4Config);

/// TRCCONFIGR: return stack.
pub const TRCCONFIGR_RS: u32 = 1 << 12;
/// TRCCONFIGR: global timestamping.
pub const TRCCONFIGR_TS: u32 = 1 << 11;
/// TRCCONFIGR: context ID tracing.
pub const TRCCONFIGR_CID: u32 = 1 << 6;
/// TRCCONFIGR: virtual context ID tracing.
pub const TRCCONFIGR_VMID: u32 = 1 << 7;
/// TRCSYNCPR: a synchronisation packet every 4 KiB.
pub const TRCSYNCPR_4K: u32 = 12;
/// TRCVICTLR: start/stop logic starts in the started state.
pub const TRCVICTLR_SSSTATUS: u32 = 1 << 9;

// CoreSight exists on arm64 only; the layout is that of LP64.
#[cfg(target_pointer_width = "64")]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<Etmv4Config>() == 816);
    assert!(offset_of!(Etmv4Config, seq_idx) == 56 && offset_of!(Etmv4Config, seq_ctrl) == 60);
    assert!(offset_of!(Etmv4Config, cntr_idx) == 84 && offset_of!(Etmv4Config, res_ctrl) == 140);
    assert!(offset_of!(Etmv4Config, ss_ctrl) == 272 && offset_of!(Etmv4Config, ss_pe_cmp) == 336);
    assert!(offset_of!(Etmv4Config, addr_val) == 376 && offset_of!(Etmv4Config, addr_acc) == 504);
    assert!(offset_of!(Etmv4Config, addr_type) == 632 && offset_of!(Etmv4Config, ctxid_pid) == 656);
    assert!(
        offset_of!(Etmv4Config, ctxid_mask0) == 720 && offset_of!(Etmv4Config, vmid_val) == 736
    );
    assert!(offset_of!(Etmv4Config, vmid_mask1) == 804 && offset_of!(Etmv4Config, ext_inp) == 808);
    assert!(offset_of!(Etmv4Config, s_ex_level) == 812);
};

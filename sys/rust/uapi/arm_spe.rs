//! `sys/arm64/spe/arm_spe.h`: the ARM Statistical Profiling Extension
//! configuration and buffer-service structs of the "spe" backend.
//!
//! FreeBSD does not install this header; the layout is pinned by the
//! assertions at the end of this file.

use crate::plain::impl_plain;

/// `config_version` the backend accepts.
pub const ARM_SPE_CONFIG_VERSION: i32 = 1;
/// `data_version` of [`ArmSpeSvcBuf`] the backend accepts.
pub const ARM_SPE_SVC_BUF_VERSION: i32 = 1;

abi_enum! {
    /// `enum arm_spe_profiling_level`.
    pub enum ArmSpeProfilingLevel: u32 {
        KernelAndUser = 0 => ("ARM_SPE_KERNEL_AND_USER", "profile EL1 and EL0"),
        KernelOnly = 1 => ("ARM_SPE_KERNEL_ONLY", "profile EL1"),
        UserOnly = 2 => ("ARM_SPE_USER_ONLY", "profile EL0"),
    }
}

abi_enum! {
    /// `enum arm_spe_ctx_field`: what CONTEXTIDR_EL1 carries into records.
    pub enum ArmSpeCtxField: u32 {
        None = 0 => ("ARM_SPE_CTX_NONE", "no context"),
        Pid = 1 => ("ARM_SPE_CTX_PID", "process id"),
        CpuId = 2 => ("ARM_SPE_CTX_CPU_ID", "CPU id"),
    }
}

/// `struct arm_spe_config`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArmSpeConfig {
    /// Sampling interval; 0 selects the implementation minimum.
    pub interval: u32,
    /// [`ArmSpeProfilingLevel`].
    pub level: u32,
    /// [`ArmSpeCtxField`].
    pub ctx_field: u32,
}

/// `struct arm_spe_svc_buf`: the buffer half userland finished copying.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArmSpeSvcBuf {
    /// CPU (CPU mode) or thread id (thread mode).
    pub ident: u32,
    /// Bit 0: which half (`buf_idx : 1` in C); other bits are zero.
    pub buf_idx: u8,
}

impl ArmSpeSvcBuf {
    /// The 1-bit `buf_idx` field.
    pub const fn buf_idx(&self) -> u8 {
        self.buf_idx & 1
    }
}

impl_plain!(ArmSpeConfig, ArmSpeSvcBuf);

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<ArmSpeConfig>() == 12);
    assert!(offset_of!(ArmSpeConfig, level) == 4 && offset_of!(ArmSpeConfig, ctx_field) == 8);
    assert!(size_of::<ArmSpeSvcBuf>() == 8 && offset_of!(ArmSpeSvcBuf, buf_idx) == 4);
};

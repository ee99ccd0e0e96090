//! The CPUs of a CPU-mode context (hwt_cpu.c).

use crate::hwt_vm::HwtVm;

/// One traced CPU and its buffer (`struct hwt_cpu`).
#[derive(Debug)]
pub(crate) struct HwtCpu {
    pub(crate) cpu_id: u32,
    pub(crate) vm: HwtVm,
}

//! The x86 machine-dependent layer (hwpmc_x86.c): which vendor's code
//! sets up the counters, the local APIC's PMC interrupt, and the NMI
//! handler's registration. The call chains of the interrupted context are
//! walked by kpi's backends (the kernel's frame pointers, user frames
//! with a fault-safe copy at the return to user mode, bounded by
//! `kern.hwpmc.callchaindepth`).

use kpi::KResult;
use kpi::malloc::{KVec, Wait};
use kpi::nmi::NmiSlot;
use uapi::pmc::{PMC_NAME_MAX, PmcCaps, PmcCputype, set_c_field_str};

use crate::{MachineDep, Pmc};

/// What a counter of the width of `mask` (its bits set: see
/// [`crate::ops::width_mask`]) is written with for `value`: the count itself for a
/// counting PMC; for a sampling one (`value` its reload count)
/// 2^width - value, so that it overflows after that many events.
#[inline]
pub(crate) fn to_perfctr(sampling: bool, value: u64, mask: u64) -> u64 {
    if sampling {
        mask.wrapping_add(1).wrapping_sub(value) & mask
    } else {
        value & mask
    }
}

/// What a counter of the width of `mask` read as `raw` means: the count
/// of a counting PMC; for a sampling one the events left before it
/// overflows, 0 once it has (its top bit is clear again).
#[inline]
pub(crate) fn from_perfctr(sampling: bool, raw: u64, mask: u64) -> u64 {
    let v = raw & mask;
    if !sampling {
        v
    } else if v & !(mask >> 1) == 0 {
        0
    } else {
        mask - v + 1
    }
}

/// Whether the PMC a class's row holds samples (as its interrupt handler
/// sees the row, without a lock).
pub(crate) fn samples(slot: &NmiSlot<Pmc>) -> bool {
    slot.with(|pm| pm.is_some_and(|pm| !pm.mode.is_counting()))
}

/// A row's name, `PREFIX-n` (`IAP-0`, `K8-5`).
pub(crate) fn row_name(prefix: &str, ri: u32) -> [u8; PMC_NAME_MAX] {
    let mut name = [0; PMC_NAME_MAX];
    let mut buf = kpi::LineBuf::<16>::new();
    let _ = core::fmt::Write::write_fmt(&mut buf, format_args!("{prefix}-{ri}"));
    set_c_field_str(&mut name, buf.as_str().as_bytes());
    name
}

/// CPUID leaf 1's signature, decoded as FreeBSD's `cpu_id` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// The raw EAX.
    pub eax: u32,
    /// The base family field (bits 11:8).
    pub base_family: u32,
    /// Base plus extended family.
    pub family: u32,
    /// Model with the extended model in its high nibble.
    pub model: u32,
    /// Stepping.
    pub stepping: u32,
}

impl Signature {
    /// The signature of this CPU.
    pub fn read() -> Signature {
        Signature::of(kpi::x86::cpuid(1, 0)[0])
    }

    /// Decodes CPUID.1:EAX.
    pub fn of(eax: u32) -> Signature {
        let base_family = eax >> 8 & 0xF;
        Signature {
            eax,
            base_family,
            family: base_family + (eax >> 20 & 0xFF),
            model: (eax >> 4 & 0xF) | (eax >> 12 & 0xF0),
            stepping: eax & 0xF,
        }
    }
}

/// The CPU vendors the driver knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// GenuineIntel.
    Intel,
    /// AuthenticAMD or HygonGenuine.
    Amd,
}

/// The vendor of CPUID leaf 0.
pub fn vendor() -> Option<Vendor> {
    let [_, ebx, ecx, edx] = kpi::x86::cpuid(0, 0);
    let mut id = [0u8; 12];
    id[0..4].copy_from_slice(&ebx.to_le_bytes());
    id[4..8].copy_from_slice(&edx.to_le_bytes());
    id[8..12].copy_from_slice(&ecx.to_le_bytes());
    match &id {
        b"GenuineIntel" => Some(Vendor::Intel),
        b"AuthenticAMD" | b"HygonGenuine" => Some(Vendor::Amd),
        _ => None,
    }
}

/// `pmc_md_initialize`: the vendor's classes, with the PMC interrupt
/// enabled in the local APIC (without it no class may interrupt); the
/// generic classes (TSC) for an unknown CPU.
pub fn md_initialize(ncpu: u32) -> KResult<MachineDep> {
    let sig = Signature::read();
    let md = match vendor() {
        Some(Vendor::Intel) => crate::hwpmc_intel::initialize(sig, ncpu)?,
        Some(Vendor::Amd) => crate::hwpmc_amd::initialize(sig, ncpu)?,
        None => None,
    };
    let Some(mut md) = md else {
        return MachineDep::detect(ncpu);
    };
    if !kpi::x86::lapic_enable_pcint() {
        // No PMC interrupt: counting only.
        let mut classes = KVec::with_capacity(md.classes.len(), Wait::WaitOk)?;
        while !md.classes.is_empty() {
            let dep = md.classes.remove(0);
            let _ = classes
                .push_within_capacity(crate::hwpmc_class::without_caps(dep, PmcCaps::INTERRUPT)?);
        }
        md.classes = classes;
        md.intr = None;
    }
    Ok(md)
}

/// `pmc_md_finalize`: the PMC interrupt off again.
pub fn md_finalize(cputype: PmcCputype) {
    if cputype != PmcCputype::Generic {
        kpi::x86::lapic_disable_pcint();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::width_mask;

    #[test]
    fn reload_conversions() {
        let m = width_mask(48);
        assert_eq!(to_perfctr(true, 1, m), (1 << 48) - 1);
        assert_eq!(to_perfctr(true, 65536, m), (1 << 48) - 65536);
        assert_eq!(from_perfctr(true, (1 << 48) - 65536, m), 65536);
        assert_eq!(from_perfctr(true, 5, m), 0, "overflowed");
        assert_eq!(from_perfctr(true, 1 << 47, m), 1 << 47, "top bit set");
        assert_eq!(to_perfctr(false, 1 << 50 | 7, m), 7, "counting: masked");
        assert_eq!(from_perfctr(false, 5, m), 5);
        let m = width_mask(64);
        assert_eq!(to_perfctr(true, 3, m), u64::MAX - 2);
        assert_eq!(from_perfctr(true, u64::MAX - 2, m), 3);
    }
}

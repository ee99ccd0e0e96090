//! The x86 machine-dependent layer (hwpmc_x86.c): which vendor's code
//! sets up the counters, the local APIC's PMC interrupt, and the NMI
//! handler's registration. The call chains of the interrupted context are
//! walked by kpi's backends (the kernel's frame pointers, user frames
//! with a fault-safe copy at the return to user mode, bounded by
//! `kern.hwpmc.callchaindepth`).

use kpi::KResult;
use kpi::malloc::{KVec, Wait};
use uapi::pmc::{PmcCaps, PmcCputype};

use crate::MachineDep;

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

//! The x86 side of the simulated CPUs: identification (CPUID), the
//! performance-monitoring units (`x86/pmu.rs`) and the local APIC's
//! performance-counter interrupt entry, which the driver programs with
//! `rdmsr`/`wrmsr`, `cpuid` and FreeBSD's `lapic_*_pmc` functions.
//!
//! The model is chosen by the machine's CPU key (`MachineConfig::cpuid`,
//! `GenuineIntel-6-55-4` or `AuthenticAMD-23-31-0`, the form of
//! `kern.hwpmc.cpuid`): the key gives CPUID's family, model and stepping,
//! and the family and model choose the PMU ([`PmuSpec::for_model`]). A
//! model with no PMU here reports architectural performance monitoring
//! version 0 (Intel) or no core counters (AMD), so a driver falls back to
//! its software classes, as on such hardware.

pub mod pmu;
pub mod pt;

pub use pmu::{GpFault, Pmu, PmuSet};
pub use pt::{PtSet, PtUnit};

/// The CPU vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Vendor {
    /// `GenuineIntel`.
    Intel,
    /// `AuthenticAMD`.
    Amd,
}

impl Vendor {
    /// The 12-byte vendor string of CPUID leaf 0.
    pub fn id_string(self) -> &'static [u8; 12] {
        match self {
            Vendor::Intel => b"GenuineIntel",
            Vendor::Amd => b"AuthenticAMD",
        }
    }
}

/// What a PMU model has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PmuSpec {
    /// Intel architectural performance monitoring.
    Intel {
        /// Version (CPUID.0AH:EAX[7:0]), 2 to 5.
        version: u8,
        /// Programmable counters per logical CPU.
        gp: u8,
        /// Fixed-function counters.
        fixed: u8,
        /// Width of every counter in bits.
        width: u8,
        /// The bits MSR_OFFCORE_RSP_0/1 keep; a write of another faults.
        offcore_valid: u64,
        /// The microarchitecture, for messages and documentation.
        name: &'static str,
    },
    /// AMD core performance counters (family 17h and later, with
    /// PerfCtrExtCore).
    Amd {
        /// Core counters (6 with PerfCtrExtCore).
        counters: u8,
        /// Counter width in bits.
        width: u8,
        /// The microarchitecture.
        name: &'static str,
    },
}

impl PmuSpec {
    /// The PMU of a family and model; None for models this simulator
    /// gives no counters.
    pub fn for_model(vendor: Vendor, family: u32, model: u32) -> Option<PmuSpec> {
        let intel = |version, gp, fixed, name| PmuSpec::Intel {
            version,
            gp,
            fixed,
            width: 48,
            offcore_valid: (1 << 38) - 1,
            name,
        };
        // Sandy Bridge and Ivy Bridge reserve bits 12-14 and 23-30 of the
        // off-core response registers too (FreeBSD's
        // IA_OFFCORE_RSP_MASK_SBIB).
        let sbib = |name| PmuSpec::Intel {
            version: 3,
            gp: 4,
            fixed: 3,
            width: 48,
            offcore_valid: 0x3F_807F_8FFF,
            name,
        };
        match (vendor, family) {
            (Vendor::Intel, 6) => match model {
                // Core 2 (Penryn): version 2, 40-bit counters.
                0x17 => Some(PmuSpec::Intel {
                    version: 2,
                    gp: 2,
                    fixed: 3,
                    width: 40,
                    offcore_valid: 0,
                    name: "Penryn",
                }),
                0x2A | 0x2D => Some(sbib("Sandy Bridge")),
                0x3A | 0x3E => Some(sbib("Ivy Bridge")),
                0x3C | 0x3F | 0x45 | 0x46 => Some(intel(3, 4, 3, "Haswell")),
                0x3D | 0x47 | 0x4F | 0x56 => Some(intel(3, 4, 3, "Broadwell")),
                0x4E | 0x5E | 0x8E | 0x9E | 0xA5 | 0xA6 => Some(intel(4, 4, 3, "Skylake")),
                0x55 => Some(intel(4, 4, 3, "Skylake-SP")),
                0x6A | 0x6C => Some(intel(5, 8, 4, "Ice Lake-SP")),
                // Eight programmable counters as with Hyper-Threading off.
                0x7D | 0x7E => Some(intel(5, 8, 4, "Ice Lake")),
                _ => None,
            },
            // Family 10h: the four legacy counters, no PerfCtrExtCore.
            (Vendor::Amd, 0x10) => Some(PmuSpec::Amd {
                counters: 4,
                width: 48,
                name: "K10",
            }),
            (Vendor::Amd, 0x17) => Some(PmuSpec::Amd {
                counters: 6,
                width: 48,
                name: if model < 0x30 { "Zen" } else { "Zen 2" },
            }),
            (Vendor::Amd, 0x19) => Some(PmuSpec::Amd {
                counters: 6,
                width: 48,
                name: if model < 0x10 || (0x20..0x60).contains(&model) {
                    "Zen 3"
                } else {
                    "Zen 4"
                },
            }),
            _ => None,
        }
    }
}

/// A CPU model: what CPUID reports and which PMU it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpuModel {
    /// The vendor.
    pub vendor: Vendor,
    /// The display family (base plus extended family).
    pub family: u32,
    /// The display model (extended model in the high nibble).
    pub model: u32,
    /// The stepping.
    pub stepping: u32,
    /// The PMU, if the model has one here.
    pub pmu: Option<PmuSpec>,
}

impl CpuModel {
    /// The model a CPU key names (`Vendor-family-model[-stepping]`,
    /// family in decimal, model and stepping in hex); None when the key
    /// is not an x86 one.
    pub fn from_key(key: &str) -> Option<CpuModel> {
        let mut parts = key.split('-');
        let vendor = match parts.next()? {
            "GenuineIntel" => Vendor::Intel,
            "AuthenticAMD" => Vendor::Amd,
            _ => return None,
        };
        let family: u32 = parts.next()?.parse().ok()?;
        let model = u32::from_str_radix(parts.next()?, 16).ok()?;
        let stepping = match parts.next() {
            Some(s) => u32::from_str_radix(s, 16).ok()?,
            None => 0,
        };
        if parts.next().is_some() || family > 0xFF + 0xF || model > 0xFF || stepping > 0xF {
            return None;
        }
        Some(CpuModel {
            vendor,
            family,
            model,
            stepping,
            pmu: PmuSpec::for_model(vendor, family, model),
        })
    }

    /// CPUID leaf 1's EAX: stepping, model, family, extended model and
    /// extended family.
    fn signature(&self) -> u32 {
        let (base_family, ext_family) = if self.family >= 0xF {
            (0xF, self.family - 0xF)
        } else {
            (self.family, 0)
        };
        let extended_model = if base_family == 6 || base_family == 0xF {
            self.model >> 4
        } else {
            0
        };
        self.stepping
            | (self.model & 0xF) << 4
            | base_family << 8
            | extended_model << 16
            | ext_family << 20
    }

    /// Whether the model has Intel Processor Trace ([`pt`]): the Skylake
    /// and later parts of [`PmuSpec::for_model`] (version 4 and 5 PMUs),
    /// which all have ToPA with multiple entries and XSAVES of the PT
    /// state.
    pub fn has_pt(&self) -> bool {
        matches!(self.pmu, Some(PmuSpec::Intel { version: 4.., .. }))
    }

    /// CPUID of `leaf` and `subleaf`: [EAX, EBX, ECX, EDX]. Leaves the
    /// model does not have read as zeros, as leaves past the maximum do
    /// on Intel parts.
    pub fn cpuid(&self, leaf: u32, subleaf: u32) -> [u32; 4] {
        let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let id = self.vendor.id_string();
        let pt = self.has_pt();
        match leaf {
            // Max leaf; vendor in EBX, EDX, ECX.
            0 => [
                if pt { 0x14 } else { 0xA },
                word(&id[0..4]),
                word(&id[8..12]),
                word(&id[4..8]),
            ],
            // Signature; ECX bit 15 PDCM (IA32_PERF_CAPABILITIES) on Intel
            // models with a PMU, bits 26 XSAVE and 27 OSXSAVE (the kernel
            // set CR4.OSXSAVE at boot) on PT models; EDX bit 4 TSC, bit 5
            // MSR, bit 9 APIC.
            1 => {
                let pdcm = matches!(self.pmu, Some(PmuSpec::Intel { .. }));
                [
                    self.signature(),
                    0,
                    (u32::from(pdcm) << 15) | (u32::from(pt) * (1 << 26 | 1 << 27)),
                    1 << 4 | 1 << 5 | 1 << 9,
                ]
            }
            // Structured extended features: EBX bit 25 Intel PT.
            7 if pt && subleaf == 0 => [0, 1 << 25, 0, 0],
            0xD if pt => pt::cpuid_xsave(subleaf),
            0x14 if pt => pt::cpuid_leaf_14(subleaf),
            0xA => match (self.vendor, self.pmu) {
                (
                    Vendor::Intel,
                    Some(PmuSpec::Intel {
                        version,
                        gp,
                        fixed,
                        width,
                        ..
                    }),
                ) => pmu::intel_leaf_0a(version, gp, fixed, width),
                _ => [0; 4],
            },
            0x8000_0000 if pt => [0x8000_0008, 0, 0, 0],
            0x8000_0000 => [0x8000_0001, 0, 0, 0],
            // Physical and linear address widths (MAXPHYADDR bounds the
            // PT output addresses).
            0x8000_0008 if pt => [pt::MAXPHYADDR | 48 << 8, 0, 0, 0],
            // ECX bit 23: PerfCtrExtCore (six core counters at C001_020x).
            0x8000_0001 => {
                let ext = matches!(self.pmu, Some(PmuSpec::Amd { counters: 6, .. }));
                [self.signature(), 0, u32::from(ext) << 23, 0]
            }
            _ => [0; 4],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_signatures() {
        let skx = CpuModel::from_key("GenuineIntel-6-55-4").expect("an Intel key");
        assert_eq!((skx.family, skx.model, skx.stepping), (6, 0x55, 4));
        // Family 6, model 5 + extended model 5, stepping 4.
        assert_eq!(skx.cpuid(1, 0)[0], 0x0005_0654);
        let zen2 = CpuModel::from_key("AuthenticAMD-23-31-0").expect("an AMD key");
        // Base family F, extended family 8, model 1, extended model 3.
        assert_eq!(zen2.cpuid(1, 0)[0], 0x0083_0F10);
        assert_eq!(zen2.cpuid(0x8000_0001, 0)[2] & 1 << 23, 1 << 23);
        assert_eq!(&zen2.cpuid(0, 0)[1].to_le_bytes(), b"Auth");
        assert!(CpuModel::from_key("0x00000000410fd0c0").is_none());
        assert!(CpuModel::from_key("GenuineIntel-6-zz").is_none());
        let unknown = CpuModel::from_key("GenuineIntel-6-01-1").expect("a key");
        assert_eq!(unknown.pmu, None);
        assert_eq!(unknown.cpuid(0xA, 0), [0; 4]);
    }
}

//! Intel Processor Trace (SDM vol. 3C, ch. 33 "Intel Processor Trace"),
//! one trace unit per logical CPU, as a Skylake-class part has it.
//!
//! The driver programs it with `wrmsr` (IA32_RTIT_*), or restores and
//! saves its nine registers with XRSTORS and XSAVES ([`PtSet::save_state`],
//! [`PtSet::restore_state`]); it writes packets for the user-mode
//! instructions the CPUs retire ([`PtFeed`]) into physical memory
//! ([`crate::machine::physmem`]) through ToPA tables or a single range,
//! and raises the ToPA PMI through the PMU's global status (bit 55) and
//! its LVT entry.
//!
//! Packets, as the SDM's "Packet Generation under Different Enable
//! Conditions" table gives them for the cases that arise here:
//! - enable (TraceEn 0->1, always in the kernel): PSB, TSC?, CBR, PSBEND;
//! - return to traced user code (after a system call, an interrupt, a
//!   context switch, or on entering a filter range): TIP.PGE, after a
//!   MODE.Exec when none went out since the last PSB;
//! - conditional branches: short TNT; near returns that match the
//!   return-compression stack (64 deep, DisRETC=0): a taken TNT bit;
//!   indirect jumps and calls and other returns: TIP; IPs compressed
//!   against the last IP (IPBytes 001, 010, 011);
//! - SYSCALL into the untraced kernel: TIP.PGD with the IP suppressed
//!   (a far branch; no FUP: libipt's direct_call-tip_pgd_noip-syscall
//!   test); an interrupt or exception: FUP, TIP.PGD (IP suppressed);
//! - leaving a filter range: TIP.PGD(target); a CR3 change with OS=1:
//!   PIP; reaching a TraceStop range (ADDRn_CFG=2): TIP.PGD(target) if
//!   packets were on, TraceStop, and IA32_RTIT_STATUS.Stopped;
//! - PSB+ every 2K << PSBFreq output bytes: PSB, TSC?, PIP?, CBR,
//!   MODE.Exec and FUP when packets are enabled, PSBEND;
//! - an internal-buffer overflow (only forced here,
//!   [`PtSet::force_overflow`]): packets are lost for a while, then OVF,
//!   and FUP if packets are enabled when it resolves.
//!
//! The simulated kernel runs no instructions, so kernel mode is never
//! traced, whatever RTIT_CTL.OS says (OS still enables PIP). Not modeled:
//! CYC, MTC and TMA packets (CYCEn and MTCEn are accepted and produce
//! nothing), PTWRITE, power events, long TNT, TSX.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{CpuModel, GpFault, PmuSet};
use crate::cpu::events::{BranchKind, KernelEntry, Mode, Retired, Subscriber};
use crate::machine::physmem::PhysMem;

/// MAXPHYADDR of the PT models (CPUID 0x80000008 EAX[7:0]).
pub const MAXPHYADDR: u32 = 39;
const PHYS_MASK: u64 = (1 << MAXPHYADDR) - 1;

/// The trace unit's MSRs.
pub mod msr {
    /// IA32_RTIT_OUTPUT_BASE.
    pub const OUTPUT_BASE: u32 = 0x560;
    /// IA32_RTIT_OUTPUT_MASK_PTRS.
    pub const OUTPUT_MASK_PTRS: u32 = 0x561;
    /// IA32_RTIT_CTL.
    pub const CTL: u32 = 0x570;
    /// IA32_RTIT_STATUS.
    pub const STATUS: u32 = 0x571;
    /// IA32_RTIT_CR3_MATCH.
    pub const CR3_MATCH: u32 = 0x572;
    /// IA32_RTIT_ADDR0_A; ADDRn_A is this + 2n, ADDRn_B this + 2n + 1.
    pub const ADDR0_A: u32 = 0x580;
    /// IA32_RTIT_ADDR0_B.
    pub const ADDR0_B: u32 = 0x581;
}

/// IA32_RTIT_CTL bits.
pub mod ctl {
    /// TraceEn.
    pub const TRACEEN: u64 = 1 << 0;
    /// CYCEn.
    pub const CYCEN: u64 = 1 << 1;
    /// OS: trace CPL 0.
    pub const OS: u64 = 1 << 2;
    /// User: trace CPL > 0.
    pub const USER: u64 = 1 << 3;
    /// CR3Filter.
    pub const CR3FILTER: u64 = 1 << 7;
    /// ToPA output.
    pub const TOPA: u64 = 1 << 8;
    /// MTCEn.
    pub const MTCEN: u64 = 1 << 9;
    /// TSCEn.
    pub const TSCEN: u64 = 1 << 10;
    /// DisRETC: no return compression.
    pub const DISRETC: u64 = 1 << 11;
    /// BranchEn.
    pub const BRANCHEN: u64 = 1 << 13;
    /// MTCFreq, bits 17:14.
    pub const MTCFREQ_SHIFT: u32 = 14;
    /// CycThresh, bits 22:19.
    pub const CYCTHRESH_SHIFT: u32 = 19;
    /// PSBFreq, bits 27:24.
    pub const PSBFREQ_SHIFT: u32 = 24;
    /// ADDR0_CFG, bits 35:32; ADDRn_CFG is 4n bits higher.
    pub const ADDR0_CFG_SHIFT: u32 = 32;
    /// The bits this model has: TraceEn, CYCEn, OS, User, CR3Filter,
    /// ToPA, MTCEn, TSCEn, DisRETC, BranchEn, MTCFreq, CycThresh,
    /// PSBFreq, ADDR0_CFG, ADDR1_CFG. PwrEvtEn, FUPonPTW, FabricEn and
    /// PTWEn are reserved (CPUID reports none of their features).
    pub const VALID: u64 = TRACEEN
        | CYCEN
        | OS
        | USER
        | CR3FILTER
        | TOPA
        | MTCEN
        | TSCEN
        | DISRETC
        | BRANCHEN
        | 0xF << MTCFREQ_SHIFT
        | 0xF << CYCTHRESH_SHIFT
        | 0xF << PSBFREQ_SHIFT
        | 0xFF << ADDR0_CFG_SHIFT;
}

/// IA32_RTIT_STATUS bits.
pub mod status {
    /// FilterEn (read-only).
    pub const FILTEREN: u64 = 1 << 0;
    /// ContextEn (read-only).
    pub const CONTEXTEN: u64 = 1 << 1;
    /// TriggerEn (read-only).
    pub const TRIGGEREN: u64 = 1 << 2;
    /// Error: an invalid output configuration stopped tracing.
    pub const ERROR: u64 = 1 << 4;
    /// Stopped: a ToPA STOP entry (or TraceStop) stopped tracing.
    pub const STOPPED: u64 = 1 << 5;
    /// PacketByteCnt, bits 48:32.
    pub const BYTECNT_SHIFT: u32 = 32;
    /// PacketByteCnt's mask (in place).
    pub const BYTECNT: u64 = 0x1_FFFF << BYTECNT_SHIFT;
    /// Writable bits (the read-only ones are ignored on writes).
    pub const WRITABLE: u64 = ERROR | STOPPED | BYTECNT;
    /// Bits a write may hold.
    pub const VALID: u64 = WRITABLE | FILTEREN | CONTEXTEN | TRIGGEREN;
}

/// ToPA table entry bits.
pub mod topa {
    /// END: the entry's address is the next table.
    pub const END: u64 = 1 << 0;
    /// INT: a PMI when the region fills.
    pub const INT: u64 = 1 << 2;
    /// STOP: tracing stops when the region fills.
    pub const STOP: u64 = 1 << 4;
    /// Size, bits 9:6: 4K << n.
    pub const SIZE_SHIFT: u32 = 6;
    /// Reserved bits below the address: 1, 3, 5, 11:10.
    pub const RESERVED_LOW: u64 = 1 << 1 | 1 << 3 | 1 << 5 | 0xC00;
}

/// CPUID leaf 0x14 (Skylake's values): subleaf 0 EBX CR3 filtering,
/// configurable PSB and CYC, IP filtering and TraceStop, MTC; ECX ToPA,
/// multiple ToPA entries, single-range output, LIP=0. Subleaf 1: two
/// address ranges, the MTC period, cycle threshold and PSB frequency
/// bitmaps.
pub fn cpuid_leaf_14(subleaf: u32) -> [u32; 4] {
    match subleaf {
        0 => [1, 0xF, 0x7, 0],
        1 => [
            ADDR_RANGES | (MTC_PERIODS as u32) << 16,
            CYC_THRESHOLDS as u32 | (PSB_FREQS as u32) << 16,
            0,
            0,
        ],
        _ => [0; 4],
    }
}

/// Address ranges (CPUID.14H.1:EAX[2:0]).
pub const ADDR_RANGES: u32 = 2;
/// Supported MTCFreq encodings (bitmap).
pub const MTC_PERIODS: u16 = 0x249;
/// Supported CycThresh encodings (bitmap).
pub const CYC_THRESHOLDS: u16 = 0x3FFF;
/// Supported PSBFreq encodings (bitmap).
pub const PSB_FREQS: u16 = 0x3F;

/// The PT state component of XSAVE (state 8), in its order.
pub const XSAVE_PT_SIZE: u32 = 72;
/// The XSAVE features the PT models have in XCR0: x87, SSE, AVX.
const XCR0_SUPPORTED: u32 = 0x7;
/// The legacy area, the header and AVX's 256 bytes.
const XSAVE_USER_SIZE: u32 = 512 + 64 + 256;

/// CPUID leaf 0xD: XCR0 x87, SSE and AVX; subleaf 1 XSAVEOPT, XSAVEC,
/// XGETBV with ECX=1 and XSAVES, with PT (bit 8) the only supervisor
/// state of IA32_XSS; subleaf 8 the PT component, 72 bytes, supervisor.
pub fn cpuid_xsave(subleaf: u32) -> [u32; 4] {
    match subleaf {
        0 => [XCR0_SUPPORTED, XSAVE_USER_SIZE, XSAVE_USER_SIZE, 0],
        // EBX: the compacted size of XCR0 | IA32_XSS's states (all on).
        1 => [0xF, XSAVE_USER_SIZE + XSAVE_PT_SIZE, 1 << 8, 0],
        2 => [256, 576, 0, 0],
        // Supervisor state: size, no offset, ECX bit 0 (IA32_XSS).
        8 => [XSAVE_PT_SIZE, 0, 1, 0],
        _ => [0; 4],
    }
}

/// The packet encoder: each function appends one packet's bytes, as the
/// SDM's packet definitions (33.4.2) lay them out.
pub mod packet {
    /// PSB: 02 82 repeated eight times.
    pub fn psb(out: &mut Vec<u8>) {
        for _ in 0..8 {
            out.extend_from_slice(&[0x02, 0x82]);
        }
    }

    /// PSBEND.
    pub fn psbend(out: &mut Vec<u8>) {
        out.extend_from_slice(&[0x02, 0x23]);
    }

    /// OVF.
    pub fn ovf(out: &mut Vec<u8>) {
        out.extend_from_slice(&[0x02, 0xF3]);
    }

    /// TraceStop.
    pub fn trace_stop(out: &mut Vec<u8>) {
        out.extend_from_slice(&[0x02, 0x83]);
    }

    /// PAD.
    pub fn pad(out: &mut Vec<u8>) {
        out.push(0);
    }

    /// Short TNT of `n` (1 to 6) bits, the oldest in bit `n - 1` of
    /// `bits`: the stop bit above the oldest, bit 0 clear.
    pub fn tnt(out: &mut Vec<u8>, bits: u8, n: u8) {
        debug_assert!((1..=6).contains(&n));
        out.push((1 << (n + 1)) | (bits << 1));
    }

    /// The IP packets' headers (IPBytes in bits 7:5).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum IpKind {
        /// TIP.
        Tip = 0x0D,
        /// TIP.PGE.
        TipPge = 0x11,
        /// TIP.PGD.
        TipPgd = 0x01,
        /// FUP.
        Fup = 0x1D,
    }

    /// The IPBytes form of `ip` against the last IP (None: have none):
    /// 001 (bits 15:0), 010 (31:0), 011 (47:0 sign-extended), 110
    /// (all 64).
    pub fn ip_bytes(ip: u64, last: Option<u64>) -> u8 {
        if let Some(last) = last {
            if ip >> 16 == last >> 16 {
                return 1;
            }
            if ip >> 32 == last >> 32 {
                return 2;
            }
        }
        if ((ip << 16) as i64 >> 16) as u64 == ip {
            3
        } else {
            6
        }
    }

    /// An IP packet with form `ipbytes` (0: IP suppressed).
    pub fn ip(out: &mut Vec<u8>, kind: IpKind, ipbytes: u8, ip: u64) {
        out.push(ipbytes << 5 | kind as u8);
        let n = match ipbytes {
            0 => 0,
            1 => 2,
            2 => 4,
            3 | 4 => 6,
            _ => 8,
        };
        out.extend_from_slice(&ip.to_le_bytes()[..n]);
    }

    /// PIP of `cr3` (CR3[51:5] in payload bits 47:1; NR clear).
    pub fn pip(out: &mut Vec<u8>, cr3: u64) {
        out.extend_from_slice(&[0x02, 0x43]);
        let payload = (cr3 >> 5) << 1;
        out.extend_from_slice(&payload.to_le_bytes()[..6]);
    }

    /// MODE.Exec of 64-bit code (CS.L=1, CS.D=0).
    pub fn mode_exec_64(out: &mut Vec<u8>) {
        out.extend_from_slice(&[0x99, 0x01]);
    }

    /// TSC: its low 56 bits.
    pub fn tsc(out: &mut Vec<u8>, tsc: u64) {
        out.push(0x19);
        out.extend_from_slice(&tsc.to_le_bytes()[..7]);
    }

    /// CBR: the core:bus ratio.
    pub fn cbr(out: &mut Vec<u8>, ratio: u8) {
        out.extend_from_slice(&[0x02, 0x03, ratio, 0]);
    }
}

use packet::IpKind;

/// The core:bus ratio CBR reports (32: 3.2 GHz on a 100 MHz bus).
const CORE_BUS_RATIO: u8 = 32;
/// Depth of the return-compression stack (as libipt's).
const RETSTACK: usize = 64;
/// Internal buffer size that makes the unit write to its output.
const FLUSH_AT: usize = 1024;
/// END entries followed before a ToPA walk is an error (a loop).
const MAX_END_HOPS: u32 = 16;

/// What the trace unit has counted, for tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PtStats {
    /// User instructions the unit saw while tracing.
    pub insns: u64,
    /// Bytes written to the output.
    pub bytes_out: u64,
    /// Bytes generated but dropped (Stopped, Error, overflow).
    pub bytes_dropped: u64,
    /// ToPA PMIs raised.
    pub pmis: u64,
    /// Overflows (OVF packets).
    pub overflows: u64,
    /// Writes to physical addresses that no live object has.
    pub stray_writes: u64,
}

/// One logical CPU's trace unit.
#[derive(Debug)]
pub struct PtUnit {
    ctl: u64,
    /// Error and Stopped.
    status: u64,
    output_base: u64,
    mask_ptrs: u64,
    cr3_match: u64,
    addr: [u64; 2 * ADDR_RANGES as usize],
    /// The CPU's CR3 (the address space it runs).
    cr3: u64,
    /// The CPU runs user code (else the kernel, which runs no
    /// instructions here).
    in_user: bool,
    /// PacketEn.
    packet_en: bool,
    last_ip: Option<u64>,
    /// A MODE.Exec went out since the last PSB (the mode never changes:
    /// 64-bit code only).
    mode_sent: bool,
    tnt_bits: u8,
    tnt_n: u8,
    retstack: [u64; RETSTACK],
    ret_top: usize,
    ret_len: usize,
    /// Packets not yet written out.
    buf: Vec<u8>,
    /// PacketByteCnt: bytes since the last PSB.
    since_psb: u64,
    /// The next instruction (where a PSB+'s FUP points).
    next_ip: u64,
    tsc: u64,
    /// Instructions seen while tracing (the overflow knob's clock).
    insns: u64,
    /// Forced overflow: at which instruction, for how many.
    ovf_at: Option<(u64, u64)>,
    /// Dropping packets until this instruction (an overflow).
    ovf_until: Option<u64>,
    pmi: bool,
    stats: PtStats,
}

impl Default for PtUnit {
    fn default() -> Self {
        PtUnit::new()
    }
}

fn canonical(a: u64) -> bool {
    ((a << 16) as i64 >> 16) as u64 == a
}

impl PtUnit {
    /// A unit at reset.
    pub fn new() -> PtUnit {
        PtUnit {
            ctl: 0,
            status: 0,
            output_base: 0,
            mask_ptrs: 0x7F,
            cr3_match: 0,
            addr: [0; 2 * ADDR_RANGES as usize],
            cr3: 0,
            in_user: false,
            packet_en: false,
            last_ip: None,
            mode_sent: false,
            tnt_bits: 0,
            tnt_n: 0,
            retstack: [0; RETSTACK],
            ret_top: 0,
            ret_len: 0,
            buf: Vec::with_capacity(FLUSH_AT * 2),
            since_psb: 0,
            next_ip: 0,
            tsc: 0,
            insns: 0,
            ovf_at: None,
            ovf_until: None,
            pmi: false,
            stats: PtStats::default(),
        }
    }

    fn gp(msr: u32, value: Option<u64>, why: &'static str) -> GpFault {
        GpFault { msr, value, why }
    }

    /// TraceEn.
    pub fn trace_en(&self) -> bool {
        self.ctl & ctl::TRACEEN != 0
    }

    /// TriggerEn: TraceEn with neither Stopped nor Error.
    fn trigger_en(&self) -> bool {
        self.trace_en() && self.status & (status::STOPPED | status::ERROR) == 0
    }

    /// ContextEn for user (or kernel) mode under the CR3 filter.
    fn context_en(&self, user: bool) -> bool {
        let cpl = if user { ctl::USER } else { ctl::OS };
        self.ctl & cpl != 0
            && (self.ctl & ctl::CR3FILTER == 0 || self.cr3_match == self.cr3 & !0x1F)
    }

    /// FilterEn at `ip`: inside a range whose ADDRn_CFG is 1, or
    /// anywhere when none is.
    fn filter_en(&self, ip: u64) -> bool {
        let mut any = false;
        for n in 0..ADDR_RANGES as usize {
            if self.ctl >> (ctl::ADDR0_CFG_SHIFT + 4 * n as u32) & 0xF == 1 {
                any = true;
                if (self.addr[2 * n]..=self.addr[2 * n + 1]).contains(&ip) {
                    return true;
                }
            }
        }
        !any
    }

    /// Whether `ip` is in a TraceStop range (ADDRn_CFG = 2).
    fn stops_at(&self, ip: u64) -> bool {
        (0..ADDR_RANGES as usize).any(|n| {
            self.ctl >> (ctl::ADDR0_CFG_SHIFT + 4 * n as u32) & 0xF == 2
                && (self.addr[2 * n]..=self.addr[2 * n + 1]).contains(&ip)
        })
    }

    /// PacketEn for user code at `ip`.
    fn enabled_at(&self, ip: u64) -> bool {
        self.trigger_en() && self.context_en(true) && self.filter_en(ip)
    }

    fn psb_period(&self) -> u64 {
        2048 << (self.ctl >> ctl::PSBFREQ_SHIFT & 0xF)
    }

    /// `rdmsr`.
    pub fn rdmsr(&self, m: u32) -> Result<u64, GpFault> {
        Ok(match m {
            msr::CTL => self.ctl,
            msr::STATUS => {
                let mut v = self.status | (self.since_psb.min(0x1_FFFF)) << status::BYTECNT_SHIFT;
                if self.trigger_en() {
                    v |= status::TRIGGEREN;
                }
                let user = self.in_user;
                if self.context_en(user) {
                    v |= status::CONTEXTEN;
                }
                if self.filter_en(self.next_ip) {
                    v |= status::FILTEREN;
                }
                v
            }
            msr::OUTPUT_BASE => self.output_base,
            msr::OUTPUT_MASK_PTRS => self.mask_ptrs,
            msr::CR3_MATCH => self.cr3_match,
            a if (msr::ADDR0_A..msr::ADDR0_A + 2 * ADDR_RANGES).contains(&a) => {
                self.addr[(a - msr::ADDR0_A) as usize]
            }
            _ => return Err(Self::gp(m, None, "no such MSR on this model")),
        })
    }

    /// Whether `m` is one of the unit's MSRs.
    pub fn is_pt_msr(m: u32) -> bool {
        matches!(
            m,
            msr::CTL | msr::STATUS | msr::OUTPUT_BASE | msr::OUTPUT_MASK_PTRS | msr::CR3_MATCH
        ) || (msr::ADDR0_A..msr::ADDR0_A + 2 * ADDR_RANGES).contains(&m)
    }

    /// `wrmsr`, with the SDM's #GP rules; `mem` takes what a disable
    /// flushes. The caller runs in the kernel.
    pub fn wrmsr(&mut self, m: u32, v: u64, mem: &PhysMem) -> Result<(), GpFault> {
        let fault = |why| Err(Self::gp(m, Some(v), why));
        self.enter_kernel_mode();
        if m != msr::CTL && Self::is_pt_msr(m) && self.trace_en() {
            return fault("written while IA32_RTIT_CTL.TraceEn is set");
        }
        match m {
            msr::CTL => return self.write_ctl(v, mem),
            msr::STATUS => {
                if v & !status::VALID != 0 {
                    return fault("reserved IA32_RTIT_STATUS bits set");
                }
                self.status = v & (status::ERROR | status::STOPPED);
                self.since_psb = (v & status::BYTECNT) >> status::BYTECNT_SHIFT;
            }
            msr::OUTPUT_BASE => {
                if v & 0x7F != 0 || v & !PHYS_MASK != 0 {
                    return fault("reserved IA32_RTIT_OUTPUT_BASE bits set");
                }
                self.output_base = v;
            }
            // Bits 6:0 (LowerMask) read as ones whatever is written.
            msr::OUTPUT_MASK_PTRS => self.mask_ptrs = v | 0x7F,
            msr::CR3_MATCH => {
                if v & 0x1F != 0 || v & !PHYS_MASK != 0 {
                    return fault("reserved IA32_RTIT_CR3_MATCH bits set");
                }
                self.cr3_match = v;
            }
            a if (msr::ADDR0_A..msr::ADDR0_A + 2 * ADDR_RANGES).contains(&a) => {
                if !canonical(v) {
                    return fault("IA32_RTIT_ADDRn not canonical");
                }
                self.addr[(a - msr::ADDR0_A) as usize] = v;
            }
            _ => return fault("no such MSR on this model"),
        }
        Ok(())
    }

    fn write_ctl(&mut self, v: u64, mem: &PhysMem) -> Result<(), GpFault> {
        let fault = |why| Err(Self::gp(msr::CTL, Some(v), why));
        if v & !ctl::VALID != 0 {
            return fault("reserved IA32_RTIT_CTL bits set");
        }
        if self.trace_en() && (v ^ self.ctl) & !ctl::TRACEEN != 0 {
            return fault("IA32_RTIT_CTL changed while TraceEn is set");
        }
        let field = |shift: u32| (v >> shift & 0xF) as u16;
        if MTC_PERIODS >> field(ctl::MTCFREQ_SHIFT) & 1 == 0 {
            return fault("unsupported MTCFreq");
        }
        if CYC_THRESHOLDS >> field(ctl::CYCTHRESH_SHIFT) & 1 == 0 {
            return fault("unsupported CycThresh");
        }
        if PSB_FREQS >> field(ctl::PSBFREQ_SHIFT) & 1 == 0 {
            return fault("unsupported PSBFreq");
        }
        for n in 0..ADDR_RANGES {
            if field(ctl::ADDR0_CFG_SHIFT + 4 * n) > 2 {
                return fault("reserved ADDRn_CFG encoding");
            }
        }
        let was = self.trace_en();
        self.ctl = v;
        match (was, self.trace_en()) {
            (false, true) => self.enable(),
            (true, false) => self.disable(mem),
            _ => {}
        }
        Ok(())
    }

    fn enable(&mut self) {
        self.packet_en = false;
        self.reset_compression();
        self.ovf_until = None;
        self.buf.clear();
        if self.trigger_en() {
            self.psb_plus();
        }
    }

    fn disable(&mut self, mem: &PhysMem) {
        // In the kernel, packets are already off (case 3a): nothing but
        // the flush.
        self.flush_tnt();
        self.flush(mem);
        self.packet_en = false;
    }

    fn reset_compression(&mut self) {
        self.last_ip = None;
        self.mode_sent = false;
        self.tnt_bits = 0;
        self.tnt_n = 0;
        self.ret_len = 0;
    }

    fn dropping(&self) -> bool {
        self.ovf_until.is_some()
    }

    fn emit_ip(&mut self, kind: IpKind, ip: Option<u64>) {
        self.flush_tnt();
        if self.dropping() {
            return;
        }
        let before = self.buf.len();
        match ip {
            Some(ip) => {
                let b = packet::ip_bytes(ip, self.last_ip);
                packet::ip(&mut self.buf, kind, b, ip);
                self.last_ip = Some(ip);
            }
            None => packet::ip(&mut self.buf, kind, 0, 0),
        }
        self.since_psb += (self.buf.len() - before) as u64;
    }

    fn emit_bytes(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        if self.dropping() {
            return;
        }
        let before = self.buf.len();
        f(&mut self.buf);
        self.since_psb += (self.buf.len() - before) as u64;
    }

    fn flush_tnt(&mut self) {
        if self.tnt_n == 0 {
            return;
        }
        let (bits, n) = (self.tnt_bits, self.tnt_n);
        self.tnt_bits = 0;
        self.tnt_n = 0;
        self.emit_bytes(|b| packet::tnt(b, bits, n));
    }

    fn tnt(&mut self, taken: bool) {
        if self.dropping() {
            return;
        }
        self.tnt_bits = self.tnt_bits << 1 | u8::from(taken);
        self.tnt_n += 1;
        if self.tnt_n == 6 {
            self.flush_tnt();
        }
    }

    /// PSB+: the status of the unit, at which a decoder can start.
    fn psb_plus(&mut self) {
        self.flush_tnt();
        self.reset_compression();
        if self.dropping() {
            return;
        }
        let start = self.buf.len();
        packet::psb(&mut self.buf);
        if self.ctl & ctl::TSCEN != 0 {
            packet::tsc(&mut self.buf, self.tsc);
        }
        let user = self.in_user;
        if self.ctl & ctl::OS != 0 && self.context_en(user) {
            packet::pip(&mut self.buf, self.cr3);
        }
        packet::cbr(&mut self.buf, CORE_BUS_RATIO);
        if self.packet_en {
            packet::mode_exec_64(&mut self.buf);
            self.mode_sent = true;
            let b = packet::ip_bytes(self.next_ip, None);
            packet::ip(&mut self.buf, IpKind::Fup, b, self.next_ip);
            self.last_ip = Some(self.next_ip);
        }
        packet::psbend(&mut self.buf);
        // PacketByteCnt restarts at the PSB.
        self.since_psb = (self.buf.len() - start) as u64;
    }

    fn push_ret(&mut self, addr: u64) {
        self.ret_top = (self.ret_top + 1) % RETSTACK;
        self.retstack[self.ret_top] = addr;
        self.ret_len = (self.ret_len + 1).min(RETSTACK);
    }

    fn pop_ret_if(&mut self, target: u64) -> bool {
        if self.ret_len == 0 || self.retstack[self.ret_top] != target {
            return false;
        }
        self.ret_top = (self.ret_top + RETSTACK - 1) % RETSTACK;
        self.ret_len -= 1;
        true
    }

    fn pge(&mut self, ip: u64) {
        self.packet_en = true;
        self.ret_len = 0;
        // MODE.Exec only when none went out since the last PSB (SDM's
        // packet generation table, TIP.PGE cases).
        if !self.mode_sent && !self.dropping() {
            self.emit_bytes(packet::mode_exec_64);
            self.mode_sent = true;
        }
        self.emit_ip(IpKind::TipPge, Some(ip));
    }

    /// The kernel (a `wrmsr`, a context switch) runs on the CPU.
    fn enter_kernel_mode(&mut self) {
        self.in_user = false;
        self.packet_en = false;
    }

    /// One retired instruction.
    pub fn retired(&mut self, insn: &Retired<'_>, mem: &PhysMem) {
        if !self.trigger_en() || insn.mode != Mode::User {
            return;
        }
        self.tsc += 1;
        self.insns += 1;
        self.stats.insns += 1;
        if let Some((at, len)) = self.ovf_at {
            if self.insns >= at {
                self.ovf_at = None;
                self.overflow_begin(len);
            }
        }
        if !self.in_user {
            // Back from the kernel.
            self.in_user = true;
            if self.enabled_at(insn.pc) {
                self.pge(insn.pc);
            }
        }
        let next = insn.next_pc;
        if self.ctl >> ctl::ADDR0_CFG_SHIFT & 0x22 != 0
            && self.context_en(true)
            && self.stops_at(next)
        {
            // TraceStop: TIP.PGD(target) if packets were on, then
            // TraceStop, and Stopped clears TriggerEn.
            if self.packet_en {
                self.emit_ip(IpKind::TipPgd, Some(next));
                self.packet_en = false;
            }
            self.flush_tnt();
            self.emit_bytes(packet::trace_stop);
            self.next_ip = next;
            // Out before Stopped, which ends the output.
            self.flush(mem);
            self.status |= status::STOPPED;
            return;
        }
        let stays = self.enabled_at(next);
        if self.packet_en {
            if !stays {
                // Leaving a filter range (or the context): the target.
                self.emit_ip(IpKind::TipPgd, Some(next));
                self.packet_en = false;
            } else if let Some(b) = insn.branch.filter(|_| self.ctl & ctl::BRANCHEN != 0) {
                let ret_addr = insn.pc + u64::from(insn.len);
                match b.kind {
                    BranchKind::Conditional => self.tnt(b.taken),
                    BranchKind::Jump => {}
                    BranchKind::Call => self.push_ret(ret_addr),
                    BranchKind::IndirectCall => {
                        self.push_ret(ret_addr);
                        self.emit_ip(IpKind::Tip, Some(next));
                    }
                    BranchKind::IndirectJump => self.emit_ip(IpKind::Tip, Some(next)),
                    BranchKind::Return => {
                        if self.ctl & ctl::DISRETC == 0 && !self.dropping() && self.pop_ret_if(next)
                        {
                            self.tnt(true);
                        } else {
                            self.emit_ip(IpKind::Tip, Some(next));
                        }
                    }
                }
            }
        } else if stays {
            self.pge(next);
        }
        self.next_ip = next;
        if let Some(until) = self.ovf_until {
            if self.insns >= until {
                self.overflow_end();
            }
        }
        if self.since_psb >= self.psb_period() {
            self.psb_plus();
        }
        if self.buf.len() >= FLUSH_AT {
            self.flush(mem);
        }
    }

    /// User mode was left for the kernel.
    pub fn kernel_entry(&mut self, entry: KernelEntry, mem: &PhysMem) {
        if !self.in_user {
            return;
        }
        self.in_user = false;
        if !self.trigger_en() {
            return;
        }
        if self.packet_en {
            match entry {
                // A far branch to an untraced context: TIP.PGD with no IP.
                KernelEntry::Syscall => self.emit_ip(IpKind::TipPgd, None),
                KernelEntry::Interrupt { ip } | KernelEntry::Exception { ip } => {
                    self.emit_ip(IpKind::Fup, Some(ip));
                    self.emit_ip(IpKind::TipPgd, None);
                }
            }
            self.packet_en = false;
        }
        self.flush(mem);
    }

    /// The CPU's CR3 changes (a context switch, in the kernel): PIP when
    /// OS is traced.
    pub fn set_cr3(&mut self, cr3: u64) {
        if cr3 == self.cr3 {
            return;
        }
        self.enter_kernel_mode();
        self.cr3 = cr3;
        if self.trigger_en() && self.ctl & ctl::OS != 0 && self.context_en(false) {
            self.flush_tnt();
            self.emit_bytes(|b| packet::pip(b, cr3));
        }
    }

    /// The CPU's time-stamp counter is at least `tsc` (the machine's, at
    /// a context switch); the unit's count goes on from there, a cycle an
    /// instruction.
    pub fn sync_tsc(&mut self, tsc: u64) {
        self.tsc = self.tsc.max(tsc);
    }

    /// The CPU's CR3.
    pub fn cr3(&self) -> u64 {
        self.cr3
    }

    fn overflow_begin(&mut self, len: u64) {
        // The internal buffer's packets are lost with what follows.
        self.stats.bytes_dropped += self.buf.len() as u64;
        self.buf.clear();
        self.tnt_n = 0;
        self.tnt_bits = 0;
        self.ovf_until = Some(self.insns + len.max(1));
    }

    fn overflow_end(&mut self) {
        self.ovf_until = None;
        self.stats.overflows += 1;
        self.reset_compression();
        self.emit_bytes(packet::ovf);
        if self.packet_en {
            let ip = self.next_ip;
            self.emit_ip(IpKind::Fup, Some(ip));
        }
    }

    /// Forces an internal-buffer overflow after `after` more traced
    /// instructions, lasting `lost` instructions.
    pub fn force_overflow(&mut self, after: u64, lost: u64) {
        self.ovf_at = Some((self.insns + after, lost));
    }

    /// Writes the internal buffer to the output.
    fn flush(&mut self, mem: &PhysMem) {
        if self.buf.is_empty() {
            return;
        }
        let data = std::mem::take(&mut self.buf);
        if self.ctl & ctl::TOPA != 0 {
            self.out_topa(&data, mem);
        } else {
            self.out_single(&data, mem);
        }
        self.buf = data;
        self.buf.clear();
    }

    fn stop_output(&mut self, why: u64, left: usize) {
        self.status |= why;
        self.stats.bytes_dropped += left as u64;
        self.packet_en = false;
    }

    fn write_out(&mut self, paddr: u64, data: &[u8], mem: &PhysMem) {
        if mem.write_phys(paddr, data).is_err() {
            self.stats.stray_writes += 1;
        }
        self.stats.bytes_out += data.len() as u64;
    }

    fn out_single(&mut self, data: &[u8], mem: &PhysMem) {
        let mask = self.mask_ptrs & 0xFFFF_FFFF | 0x7F;
        let mut off = (self.mask_ptrs >> 32) & mask;
        let mut done = 0;
        while done < data.len() {
            let n = ((mask + 1 - off) as usize).min(data.len() - done);
            self.write_out(self.output_base + off, &data[done..done + n], mem);
            done += n;
            off = (off + n as u64) & mask;
        }
        self.mask_ptrs = off << 32 | self.mask_ptrs & 0xFFFF_FFFF;
    }

    fn out_topa(&mut self, data: &[u8], mem: &PhysMem) {
        let mut done = 0;
        let mut hops = 0;
        while done < data.len() {
            if self.status & (status::STOPPED | status::ERROR) != 0 {
                self.stats.bytes_dropped += (data.len() - done) as u64;
                return;
            }
            let index = (self.mask_ptrs >> 7) & 0x1FF_FFFF;
            let mut raw = [0u8; 8];
            if mem
                .read_phys(self.output_base + index * 8, &mut raw)
                .is_err()
            {
                self.stop_output(status::ERROR, data.len() - done);
                return;
            }
            let entry = u64::from_le_bytes(raw);
            let base = entry & PHYS_MASK & !0xFFF;
            if entry & topa::RESERVED_LOW != 0 || entry & !PHYS_MASK & !0xFFF != 0 {
                self.stop_output(status::ERROR, data.len() - done);
                return;
            }
            if entry & topa::END != 0 {
                hops += 1;
                if hops > MAX_END_HOPS {
                    self.stop_output(status::ERROR, data.len() - done);
                    return;
                }
                self.output_base = base;
                self.mask_ptrs = 0x7F;
                continue;
            }
            let size = 4096u64 << (entry >> topa::SIZE_SHIFT & 0xF);
            let off = self.mask_ptrs >> 32;
            let n = ((size - off) as usize).min(data.len() - done);
            self.write_out(base + off, &data[done..done + n], mem);
            done += n;
            let off = off + n as u64;
            if off < size {
                self.mask_ptrs = off << 32 | (index << 7) | 0x7F;
                continue;
            }
            hops = 0;
            self.mask_ptrs = (index + 1) << 7 | 0x7F;
            if entry & topa::INT != 0 {
                self.pmi = true;
                self.stats.pmis += 1;
            }
            if entry & topa::STOP != 0 {
                self.stop_output(status::STOPPED, data.len() - done);
                return;
            }
        }
    }

    /// Takes the ToPA PMI the last output raised.
    pub fn take_pmi(&mut self) -> bool {
        std::mem::replace(&mut self.pmi, false)
    }

    /// What the unit has counted.
    pub fn stats(&self) -> PtStats {
        self.stats
    }

    /// XSAVES of the PT component: the nine registers in the order of
    /// the XSAVE area (RTIT_CTL, OUTPUT_BASE, OUTPUT_MASK_PTRS, STATUS,
    /// CR3_MATCH, ADDR0_A, ADDR0_B, ADDR1_A, ADDR1_B); XSAVES then clears
    /// TraceEn (SDM 13.5.6), which flushes.
    pub fn save_state(&mut self, mem: &PhysMem) -> [u64; 9] {
        self.enter_kernel_mode();
        self.flush_tnt();
        self.flush(mem);
        let status = self.rdmsr(msr::STATUS).unwrap_or(0);
        let s = [
            self.ctl,
            self.output_base,
            self.mask_ptrs,
            status,
            self.cr3_match,
            self.addr[0],
            self.addr[1],
            self.addr[2],
            self.addr[3],
        ];
        if self.trace_en() {
            self.ctl &= !ctl::TRACEEN;
            self.disable(mem);
        }
        s
    }

    /// XRSTORS of the PT component: the registers are loaded as by
    /// `wrmsr`, IA32_RTIT_CTL last (so a TraceEn in it enables); a #GP
    /// leaves the unit as it was.
    pub fn restore_state(&mut self, s: &[u64; 9], mem: &PhysMem) -> Result<(), GpFault> {
        if self.trace_en() {
            return Err(Self::gp(
                msr::CTL,
                Some(s[0]),
                "XRSTORS of PT state while TraceEn is set",
            ));
        }
        let saved = (
            self.output_base,
            self.mask_ptrs,
            self.status,
            self.since_psb,
            self.cr3_match,
            self.addr,
        );
        let r = (|| {
            self.wrmsr(msr::OUTPUT_BASE, s[1], mem)?;
            self.wrmsr(msr::OUTPUT_MASK_PTRS, s[2], mem)?;
            self.wrmsr(msr::STATUS, s[3], mem)?;
            self.wrmsr(msr::CR3_MATCH, s[4], mem)?;
            for (n, &a) in s[5..9].iter().enumerate() {
                self.wrmsr(msr::ADDR0_A + n as u32, a, mem)?;
            }
            self.wrmsr(msr::CTL, s[0], mem)
        })();
        if r.is_err() {
            (
                self.output_base,
                self.mask_ptrs,
                self.status,
                self.since_psb,
                self.cr3_match,
                self.addr,
            ) = saved;
        }
        r
    }
}

/// IA32_XSS: the supervisor states XSAVES and XRSTORS manage.
pub const IA32_XSS: u32 = 0xDA0;
/// IA32_XSS.PT (state 8), the only supervisor state of these models.
pub const XSS_PT: u64 = 1 << 8;

/// The trace units of a machine's CPUs.
#[derive(Debug)]
pub struct PtSet {
    units: Vec<Mutex<PtUnit>>,
    /// Per CPU: IA32_XSS.
    xss: Vec<Mutex<u64>>,
    /// Per CPU: TraceEn (so the CPU must report its instructions).
    tracing: Vec<AtomicBool>,
    mem: Arc<PhysMem>,
    pmus: Arc<PmuSet>,
}

impl PtSet {
    /// The units of `ncpus` CPUs of `model`; None if it has no PT.
    pub fn new(
        model: CpuModel,
        ncpus: u32,
        mem: Arc<PhysMem>,
        pmus: Option<Arc<PmuSet>>,
    ) -> Option<Arc<PtSet>> {
        if !model.has_pt() {
            return None;
        }
        Some(Arc::new(PtSet {
            units: (0..ncpus).map(|_| Mutex::new(PtUnit::new())).collect(),
            xss: (0..ncpus).map(|_| Mutex::new(0)).collect(),
            tracing: (0..ncpus).map(|_| AtomicBool::new(false)).collect(),
            mem,
            pmus: pmus?,
        }))
    }

    /// The unit of `cpu`.
    pub fn unit(&self, cpu: u32) -> MutexGuard<'_, PtUnit> {
        self.units[cpu as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The physical memory the units write.
    pub fn physmem(&self) -> &Arc<PhysMem> {
        &self.mem
    }

    /// After the unit changed: its TraceEn, and its PMI to the PMU.
    fn sync(&self, cpu: u32, unit: &mut PtUnit) {
        self.tracing[cpu as usize].store(unit.trace_en(), Ordering::Relaxed);
        if unit.take_pmi() {
            self.pmus.raise_topa_pmi(cpu);
        }
    }

    /// Whether `msr` is one this set serves: a PT MSR or IA32_XSS.
    pub fn is_pt_msr(msr: u32) -> bool {
        PtUnit::is_pt_msr(msr) || msr == IA32_XSS
    }

    fn xss(&self, cpu: u32) -> MutexGuard<'_, u64> {
        self.xss[cpu as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// IA32_XSS of `cpu` (which states XSAVES saves).
    pub fn xss_of(&self, cpu: u32) -> u64 {
        *self.xss(cpu)
    }

    /// `rdmsr` on `cpu`.
    pub fn rdmsr(&self, cpu: u32, msr: u32) -> Result<u64, GpFault> {
        if msr == IA32_XSS {
            return Ok(*self.xss(cpu));
        }
        self.unit(cpu).rdmsr(msr)
    }

    /// `wrmsr` on `cpu`.
    pub fn wrmsr(&self, cpu: u32, msr: u32, value: u64) -> Result<(), GpFault> {
        if msr == IA32_XSS {
            if value & !XSS_PT != 0 {
                return Err(GpFault {
                    msr,
                    value: Some(value),
                    why: "reserved IA32_XSS bits set",
                });
            }
            *self.xss(cpu) = value;
            return Ok(());
        }
        let mut u = self.unit(cpu);
        let r = u.wrmsr(msr, value, &self.mem);
        self.sync(cpu, &mut u);
        r
    }

    /// XSAVES of `cpu`'s PT state ([`PtUnit::save_state`]).
    pub fn save_state(&self, cpu: u32) -> [u64; 9] {
        let mut u = self.unit(cpu);
        let s = u.save_state(&self.mem);
        self.sync(cpu, &mut u);
        s
    }

    /// XRSTORS of `cpu`'s PT state ([`PtUnit::restore_state`]).
    pub fn restore_state(&self, cpu: u32, s: &[u64; 9]) -> Result<(), GpFault> {
        let mut u = self.unit(cpu);
        let r = u.restore_state(s, &self.mem);
        self.sync(cpu, &mut u);
        r
    }

    /// Whether `cpu` traces (TraceEn).
    pub fn tracing(&self, cpu: u32) -> bool {
        self.tracing
            .get(cpu as usize)
            .is_some_and(|t| t.load(Ordering::Relaxed))
    }

    /// `cpu` switches to the address space of CR3 `cr3`.
    pub fn set_cr3(&self, cpu: u32, cr3: u64) {
        let mut u = self.unit(cpu);
        u.set_cr3(cr3);
        self.sync(cpu, &mut u);
    }

    /// `cpu`'s TSC is at least `tsc` ([`PtUnit::sync_tsc`]).
    pub fn sync_tsc(&self, cpu: u32, tsc: u64) {
        self.unit(cpu).sync_tsc(tsc);
    }

    /// Forces an internal overflow on `cpu` ([`PtUnit::force_overflow`]).
    pub fn force_overflow(&self, cpu: u32, after: u64, lost: u64) {
        self.unit(cpu).force_overflow(after, lost);
    }

    /// What `cpu`'s unit has counted.
    pub fn stats(&self, cpu: u32) -> PtStats {
        self.unit(cpu).stats()
    }

    /// The subscriber that feeds a CPU's instructions to the unit of the
    /// machine CPU they retire on.
    pub fn feed(self: &Arc<Self>) -> PtFeed {
        PtFeed {
            set: self.clone(),
            last_cpu: 0,
        }
    }
}

/// Feeds retired instructions and kernel entries to the trace units
/// ([`PtSet::feed`]).
#[derive(Debug)]
pub struct PtFeed {
    set: Arc<PtSet>,
    last_cpu: u32,
}

impl Subscriber for PtFeed {
    fn retired(&mut self, insn: &Retired<'_>) {
        self.last_cpu = insn.cpu;
        if !self.set.tracing(insn.cpu) {
            return;
        }
        let mut u = self.set.unit(insn.cpu);
        u.retired(insn, &self.set.mem);
        if u.pmi {
            self.set.sync(insn.cpu, &mut u);
        }
    }

    fn kernel_entry(&mut self, cpu: u32, entry: KernelEntry) {
        if !self.set.tracing(cpu) {
            return;
        }
        let mut u = self.set.unit(cpu);
        u.kernel_entry(entry, &self.set.mem);
        self.set.sync(cpu, &mut u);
    }

    fn wants_stop(&self) -> bool {
        self.set.pmus.pmi_pending(self.last_cpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_encodings() {
        let mut b = Vec::new();
        packet::psb(&mut b);
        assert_eq!(b, [0x02, 0x82].repeat(8));
        b.clear();
        packet::psbend(&mut b);
        packet::ovf(&mut b);
        packet::pad(&mut b);
        packet::trace_stop(&mut b);
        assert_eq!(b, [0x02, 0x23, 0x02, 0xF3, 0x00, 0x02, 0x83]);
        b.clear();
        // T, N, T (oldest first): stop bit at 4, bits 3:1 = 101.
        packet::tnt(&mut b, 0b101, 3);
        packet::tnt(&mut b, 0b111111, 6);
        packet::tnt(&mut b, 0b0, 1);
        assert_eq!(b, [0b0001_1010, 0b1111_1110, 0b0000_0100]);
        b.clear();
        packet::ip(&mut b, IpKind::Tip, 1, 0x1234_5678);
        assert_eq!(b, [0x2D, 0x78, 0x56]);
        b.clear();
        packet::ip(&mut b, IpKind::TipPge, 2, 0x1234_5678);
        assert_eq!(b, [0x51, 0x78, 0x56, 0x34, 0x12]);
        b.clear();
        packet::ip(&mut b, IpKind::Fup, 3, 0x7fff_1234_5678);
        assert_eq!(b, [0x7D, 0x78, 0x56, 0x34, 0x12, 0xff, 0x7f]);
        b.clear();
        packet::ip(&mut b, IpKind::TipPgd, 0, 0);
        assert_eq!(b, [0x01]);
        b.clear();
        packet::ip(&mut b, IpKind::Tip, 6, 0x8000_0000_0000_0001);
        assert_eq!(b, [0xCD, 1, 0, 0, 0, 0, 0, 0, 0x80]);
        b.clear();
        packet::pip(&mut b, 0x1234_5000);
        // CR3 >> 5 = 0x91A280, shifted left by one.
        assert_eq!(b, [0x02, 0x43, 0x00, 0x45, 0x23, 0x01, 0x00, 0x00]);
        b.clear();
        packet::mode_exec_64(&mut b);
        packet::cbr(&mut b, 32);
        packet::tsc(&mut b, 0x0102_0304_0506_0708);
        assert_eq!(
            b,
            [0x99, 0x01, 0x02, 0x03, 32, 0, 0x19, 8, 7, 6, 5, 4, 3, 2]
        );
        assert_eq!(packet::ip_bytes(0x40_1234, Some(0x40_0000)), 1);
        assert_eq!(packet::ip_bytes(0x41_1234, Some(0x40_0000)), 2);
        assert_eq!(packet::ip_bytes(0x1_0041_1234, Some(0x40_0000)), 3);
        assert_eq!(packet::ip_bytes(0x41_1234, None), 3);
        assert_eq!(packet::ip_bytes(0xffff_8000_0000_0000, None), 3);
        assert_eq!(packet::ip_bytes(0x8000_0000_0000_0000, None), 6);
    }

    #[test]
    fn msr_gp_rules() {
        let mem = PhysMem::new();
        let mut u = PtUnit::new();
        let gp = |r: Result<(), GpFault>| r.expect_err("#GP");
        gp(u.wrmsr(msr::CTL, 1 << 4, &mem)); // PwrEvtEn
        gp(u.wrmsr(msr::CTL, 1 << 6, &mem)); // FabricEn
        gp(u.wrmsr(msr::CTL, 1 << 12, &mem)); // PTWEn
        gp(u.wrmsr(msr::CTL, 1 << 40, &mem)); // ADDR2_CFG
        gp(u.wrmsr(msr::CTL, 3 << 32, &mem)); // ADDR0_CFG = 3
        gp(u.wrmsr(msr::CTL, 0xF << ctl::PSBFREQ_SHIFT, &mem));
        gp(u.wrmsr(msr::CTL, 1 << ctl::MTCFREQ_SHIFT, &mem));
        gp(u.wrmsr(msr::OUTPUT_BASE, 0x1040, &mem));
        gp(u.wrmsr(msr::OUTPUT_BASE, 1 << MAXPHYADDR, &mem));
        gp(u.wrmsr(msr::CR3_MATCH, 0x1001, &mem));
        gp(u.wrmsr(msr::ADDR0_A, 0x8000_0000_0000, &mem));
        gp(u.wrmsr(msr::STATUS, 1 << 3, &mem));
        gp(u.wrmsr(0x584, 0, &mem)); // ADDR2_A: two ranges only
        assert!(u.rdmsr(0x584).is_err());
        u.wrmsr(msr::ADDR0_A, 0xffff_8000_0000_0000, &mem).unwrap();
        u.wrmsr(msr::OUTPUT_MASK_PTRS, 0, &mem).unwrap();
        assert_eq!(u.rdmsr(msr::OUTPUT_MASK_PTRS), Ok(0x7F));
        let on = ctl::TRACEEN | ctl::USER | ctl::BRANCHEN | ctl::TOPA;
        u.wrmsr(msr::CTL, on, &mem).unwrap();
        // While TraceEn: the same value is fine, other bits and other
        // MSRs fault.
        u.wrmsr(msr::CTL, on, &mem).unwrap();
        gp(u.wrmsr(msr::CTL, on | ctl::OS, &mem));
        for m in [
            msr::STATUS,
            msr::OUTPUT_BASE,
            msr::OUTPUT_MASK_PTRS,
            msr::CR3_MATCH,
            msr::ADDR0_A + 3,
        ] {
            gp(u.wrmsr(m, 0, &mem));
        }
        assert_ne!(u.rdmsr(msr::STATUS).unwrap() & status::TRIGGEREN, 0);
        u.wrmsr(msr::CTL, on & !ctl::TRACEEN, &mem).unwrap();
        u.wrmsr(msr::STATUS, 0, &mem).unwrap();
    }

    #[test]
    fn cpuid_of_pt() {
        let skl = CpuModel::from_key("GenuineIntel-6-5E-3").unwrap();
        assert!(skl.has_pt());
        assert_eq!(skl.cpuid(0, 0)[0], 0x14);
        assert_ne!(skl.cpuid(7, 0)[1] & 1 << 25, 0);
        assert_eq!(skl.cpuid(1, 0)[2] & 3 << 26, 3 << 26);
        let d1 = skl.cpuid(0xD, 1);
        assert_eq!(d1[0] & 0xA, 0xA);
        assert_eq!(d1[2], 1 << 8);
        assert_eq!(skl.cpuid(0xD, 8), [72, 0, 1, 0]);
        assert_eq!(skl.cpuid(0x14, 0), [1, 0xF, 0x7, 0]);
        assert_eq!(skl.cpuid(0x14, 1)[0] & 7, 2);
        let hsw = CpuModel::from_key("GenuineIntel-6-3C-3").unwrap();
        assert!(!hsw.has_pt());
        assert_eq!(hsw.cpuid(0x14, 0), [0; 4]);
        let zen = CpuModel::from_key("AuthenticAMD-23-31-0").unwrap();
        assert!(!zen.has_pt());
        assert_eq!(zen.cpuid(7, 0), [0; 4]);
    }

    #[test]
    fn xsave_state_round_trip() {
        let mem = PhysMem::new();
        let mut u = PtUnit::new();
        u.wrmsr(msr::ADDR0_A, 0x1000, &mem).unwrap();
        u.wrmsr(msr::ADDR0_B, 0x2000, &mem).unwrap();
        u.wrmsr(msr::OUTPUT_BASE, 0x1_0000_0000, &mem).unwrap();
        let on = ctl::TRACEEN | ctl::USER | ctl::TOPA | 1 << 32;
        u.wrmsr(msr::CTL, on, &mem).unwrap();
        let s = u.save_state(&mem);
        assert_eq!(s[0], on);
        assert_eq!(s[1], 0x1_0000_0000);
        assert_eq!(s[5..7], [0x1000, 0x2000]);
        assert!(!u.trace_en(), "XSAVES clears TraceEn");
        let mut v = PtUnit::new();
        v.restore_state(&s, &mem).unwrap();
        assert!(v.trace_en());
        assert_eq!(v.rdmsr(msr::ADDR0_B), Ok(0x2000));
        assert!(v.restore_state(&s, &mem).is_err(), "TraceEn set");
    }

    fn user(pc: u64, next_pc: u64, branch: Option<crate::cpu::events::Branch>) -> Retired<'static> {
        Retired {
            cpu: 0,
            mode: Mode::User,
            pc,
            len: 2,
            next_pc,
            branch,
            accesses: &[],
        }
    }

    fn cond(taken: bool) -> Option<crate::cpu::events::Branch> {
        Some(crate::cpu::events::Branch {
            kind: BranchKind::Conditional,
            taken,
        })
    }

    /// A unit writing to one page in single-range mode.
    fn single_range(mem: &PhysMem) -> (PtUnit, crate::physmem::ObjId) {
        let page = mem.alloc_object(1, true).unwrap();
        let mut u = PtUnit::new();
        u.wrmsr(msr::OUTPUT_BASE, mem.page_paddr(page, 0).unwrap(), mem)
            .unwrap();
        u.wrmsr(msr::OUTPUT_MASK_PTRS, 0xFFF, mem).unwrap();
        (u, page)
    }

    #[test]
    fn packets_of_a_syscall_and_an_interrupt() {
        let mem = PhysMem::new();
        let (mut u, page) = single_range(&mem);
        u.wrmsr(msr::CTL, ctl::TRACEEN | ctl::USER | ctl::BRANCHEN, &mem)
            .unwrap();
        // Back to user at 0x401000, a taken and a not-taken branch, a
        // system call, back, and the clock at 0x401010.
        u.retired(&user(0x40_1000, 0x40_1008, cond(true)), &mem);
        u.retired(&user(0x40_1008, 0x40_100a, cond(false)), &mem);
        u.retired(&user(0x40_100a, 0x40_100c, None), &mem);
        u.kernel_entry(KernelEntry::Syscall, &mem);
        u.retired(&user(0x40_100c, 0x40_1010, None), &mem);
        u.kernel_entry(KernelEntry::Interrupt { ip: 0x40_1010 }, &mem);
        u.wrmsr(msr::CTL, ctl::USER | ctl::BRANCHEN, &mem).unwrap();
        let len = (u.rdmsr(msr::OUTPUT_MASK_PTRS).unwrap() >> 32) as usize;
        let mut out = vec![0u8; len];
        mem.read_object(page, 0, &mut out).unwrap();
        let mut want = Vec::new();
        packet::psb(&mut want);
        want.extend_from_slice(&[0x02, 0x03, CORE_BUS_RATIO, 0, 0x02, 0x23]);
        // MODE.Exec, TIP.PGE (6 bytes: no last IP after PSB+).
        want.extend_from_slice(&[0x99, 0x01, 0x71, 0x00, 0x10, 0x40, 0, 0, 0]);
        // TNT (T, N), TIP.PGD with the IP suppressed.
        want.extend_from_slice(&[0b0000_1100, 0x01]);
        // TIP.PGE (2 bytes against the last IP), FUP (2 bytes), TIP.PGD.
        want.extend_from_slice(&[0x31, 0x0c, 0x10, 0x3D, 0x10, 0x10, 0x01]);
        assert_eq!(out, want);
        assert_eq!(mem.stray_writes(), 0);
    }

    #[test]
    fn output_to_freed_pages_is_caught() {
        let mem = PhysMem::new();
        let (mut u, page) = single_range(&mem);
        u.wrmsr(msr::CTL, ctl::TRACEEN | ctl::USER | ctl::BRANCHEN, &mem)
            .unwrap();
        // A driver bug: the buffer is freed while the unit traces.
        mem.free_object(page).unwrap();
        for i in 0..2000u64 {
            u.retired(
                &user(0x40_1000 + 2 * i, 0x40_1000 + 2 * i + 2, cond(i % 3 == 0)),
                &mem,
            );
        }
        u.wrmsr(msr::CTL, ctl::USER | ctl::BRANCHEN, &mem).unwrap();
        assert!(u.stats().stray_writes > 0);
        assert!(mem.stray_writes() > 0);
        assert_eq!(mem.live_objects(), 0);
    }

    #[test]
    fn topa_end_entries_chain_tables_and_stop_ends_the_output() {
        let mem = PhysMem::new();
        let pages = mem.alloc_object(2, false).unwrap();
        let tables = mem.alloc_object(2, true).unwrap();
        let (t0, t1) = (
            mem.page_paddr(tables, 0).unwrap(),
            mem.page_paddr(tables, 1).unwrap(),
        );
        let entry = |i| mem.page_paddr(pages, i).unwrap();
        // Table 0: page 0, END to table 1; table 1: page 1 with STOP and
        // INT.
        let put = |off: usize, v: u64| mem.write_object(tables, off, &v.to_le_bytes()).unwrap();
        put(0, entry(0));
        put(8, t1 | topa::END);
        put(4096, entry(1) | topa::STOP | topa::INT);
        let mut u = PtUnit::new();
        u.wrmsr(msr::OUTPUT_BASE, t0, &mem).unwrap();
        u.wrmsr(
            msr::CTL,
            ctl::TRACEEN | ctl::TOPA | ctl::USER | ctl::BRANCHEN,
            &mem,
        )
        .unwrap();
        let mut i = 0u64;
        while u.rdmsr(msr::STATUS).unwrap() & status::STOPPED == 0 {
            let pc = 0x40_0000 + 2 * (i % 1000);
            u.retired(&user(pc, pc + 2, cond(i % 7 < 3)), &mem);
            i += 1;
            assert!(i < 1_000_000, "never stopped");
        }
        assert!(u.take_pmi(), "the STOP region had INT");
        assert_eq!(u.rdmsr(msr::OUTPUT_BASE), Ok(t1), "moved to table 1");
        assert_eq!(u.rdmsr(msr::OUTPUT_MASK_PTRS), Ok(1 << 7 | 0x7F));
        assert_eq!(u.stats().bytes_out, 2 * 4096);
        // Nothing more goes out.
        for _ in 0..10_000 {
            u.retired(&user(0x40_0000, 0x40_0002, cond(true)), &mem);
        }
        u.wrmsr(msr::CTL, ctl::TOPA | ctl::USER | ctl::BRANCHEN, &mem)
            .unwrap();
        assert_eq!(u.stats().bytes_out, 2 * 4096);
        let mut first = [0u8; 16];
        mem.read_object(pages, 0, &mut first).unwrap();
        assert_eq!(first.to_vec(), [0x02, 0x82].repeat(8), "a PSB first");
        assert_eq!(mem.stray_writes(), 0);
        // A table entry with a reserved bit is an output error.
        put(0, entry(0) | 1 << 1);
        let mut v = PtUnit::new();
        v.wrmsr(msr::OUTPUT_BASE, t0, &mem).unwrap();
        v.wrmsr(msr::CTL, ctl::TRACEEN | ctl::TOPA | ctl::USER, &mem)
            .unwrap();
        v.wrmsr(msr::CTL, ctl::TOPA | ctl::USER, &mem).unwrap();
        assert_ne!(v.rdmsr(msr::STATUS).unwrap() & status::ERROR, 0);
    }
}

//! pt(4): the Intel Processor Trace backend of hwt(4) ("pt"), as FreeBSD's
//! sys/amd64/pt/pt.c programs the unit.
//!
//! Each trace buffer (a thread's in thread mode, a CPU's in CPU mode) has
//! a context here: its ToPA table, whose entries name the buffer's pages
//! (4 KiB each, every one raising the ToPA PMI when filled) and whose END
//! entry leads back to the start, so the output is a ring; and the PT
//! state component XSAVES stores (RTIT_CTL, the output base and pointers,
//! status, CR3 match, the address ranges). Tracing on a CPU is XRSTORS of
//! that state, stopping is XSAVES. The ToPA PMI is an NMI: its handler
//! saves and restores the state around reading the output position, and a
//! software interrupt turns the position into a BUFFER record.
//!
//! Differences from FreeBSD 15.0's C backend, each for what hwt(4)
//! promises:
//! - The output position survives context switches: FreeBSD reprograms
//!   OUTPUT_MASK_PTRS to the buffer's start at every switch-in, so a
//!   thread's trace restarts at offset 0 each time it runs.
//! - ToPA tables longer than a page are chained through END entries
//!   (FreeBSD hands the unit one table from malloc, which is physically
//!   contiguous only up to a page, 511 buffer pages).
//! - STOP is implemented (FreeBSD's backend has no stop, and the
//!   framework calls it unchecked).
//! - A context without a configuration (no SET_CONFIG), or with one
//!   shorter than `struct pt_cpu_config`, is not enabled instead of being
//!   read past its end or through NULL: in CPU mode START fails with
//!   EINVAL; in thread mode, configured at each switch-in, its threads
//!   are not traced. A second CPU-mode context fails with EBUSY (FreeBSD
//!   returns -1).
//! - The handler of a ToPA PMI that finds its CPU inactive clears the
//!   status, so that the next PMI is not lost.
#![no_std]

extern crate alloc;

use hwt::{BackendOps, BackendTag, BufId, BufPtr, HwtBackend, HwtContext, RecordSink};
use kpi::KResult;
use kpi::atomic::{AtomicU32, AtomicU64, Ordering};
use kpi::cdev::{PAGE_SIZE, PageObject};
use kpi::errno::{EBUSY, EINVAL, ENOENT, ENXIO};
use kpi::intr::{Swi, SwiHandle};
use kpi::malloc::{KArc, KVec, Wait};
use kpi::nmi::NmiSlot;
use kpi::spsc::SpscRing;
use kpi::sync::{SpinMutex, SpinMutexBox};
use kpi::x86::{NmiHandler, PtState};
use uapi::Plain;
use uapi::pt::*;

/// IA32_RTIT_STATUS.
const MSR_IA32_RTIT_STATUS: u32 = 0x571;
/// IA32_PERF_GLOBAL_STATUS.
const MSR_IA_GLOBAL_STATUS: u32 = 0x38E;
/// IA32_PERF_GLOBAL_STATUS_RESET.
const MSR_IA_GLOBAL_STATUS_RESET: u32 = 0x390;
/// GLOBAL_STATUS.Trace_ToPA_PMI.
const GLOBAL_STATUS_FLAG_TRACETOPAPMI: u64 = 1 << 55;
/// RTIT_CTL.DisTNT.
const RTIT_CTL_DIS_TNT: u64 = 1 << 55;
/// ADDRn_CFG shift of range `n`.
const fn rtit_ctl_addr_cfg_s(n: u32) -> u32 {
    32 + n * 4
}
/// The RTIT_CTL bits a configuration may ask for.
const PT_SUPPORTED_FLAGS: u64 = RTIT_CTL_MTCEN
    | RTIT_CTL_CR3FILTER
    | RTIT_CTL_DIS_TNT
    | RTIT_CTL_USER
    | RTIT_CTL_OS
    | RTIT_CTL_BRANCHEN;
/// ToPA entry: the last of a table, its address the next table.
const TOPA_END: u64 = 1 << 0;
/// ToPA entry: raise the PMI when this region is full.
const TOPA_INT: u64 = 1 << 2;
/// Entries of a one-page ToPA table, its END entry included.
const TOPA_ENTRIES: usize = PAGE_SIZE / 8;
/// OUTPUT_MASK_PTRS: table entry index in bits 31:7.
const PT_TOPA_PAGE_MASK: u64 = 0xffff_ff80;
const PT_TOPA_PAGE_SHIFT: u32 = 7;
/// OUTPUT_MASK_PTRS at the start of a table (the low 7 bits are ones).
const PT_TOPA_MASK_PTRS: u64 = 0x7f;
/// The CPUID leaf of Intel PT.
const CPUID_PT_LEAF: u32 = 0x14;
/// CPUID.(EAX=14H,ECX=0):EBX bits.
const CPUPT_CR3: u32 = 1 << 0;
const CPUPT_IPF: u32 = 1 << 2;
const CPUPT_MTC: u32 = 1 << 3;
const CPUPT_DIS_TNT: u32 = 1 << 8;
/// CPUID.(EAX=14H,ECX=0):ECX bits.
const CPUPT_TOPA: u32 = 1 << 0;
const CPUPT_TOPA_MULTI: u32 = 1 << 1;
/// CPUID.(EAX=14H,ECX=1):EAX: the number of address ranges.
const CPUPT_NADDR_M: u32 = 0x7;
/// CPUID.(EAX=07H,ECX=0):EBX: Intel PT.
const CPUID_STDEXT_PROCTRACE: u32 = 1 << 25;
/// CPUID.(EAX=0DH,ECX=1):EAX: XSAVEC and XSAVES.
const CPUID_EXTSTATE_XSAVEC: u32 = 1 << 1;
const CPUID_EXTSTATE_XSAVES: u32 = 1 << 3;
/// CPUID.(EAX=0DH,ECX=1):ECX: the PT component is supervisor state.
const XFEATURE_ENABLED_PT: u32 = 1 << 8;
/// CPUID.1:ECX: XSAVE.
const CPUID2_XSAVE: u32 = 1 << 26;

/// The indices of the XSAVE area's PT component.
mod area {
    pub const CTL: usize = 0;
    pub const OUTPUT_BASE: usize = 1;
    pub const OUTPUT_MASK_PTRS: usize = 2;
    pub const STATUS: usize = 3;
    pub const ADDR0_A: usize = 5;
    pub const ADDR0_B: usize = 6;
    pub const ADDR1_A: usize = 7;
    pub const ADDR1_B: usize = 8;
}

/// What CPUID says of the unit (`pt_info`).
#[derive(Debug, Clone, Copy)]
struct CpuInfo {
    l0_ebx: u32,
    l1_eax: u32,
}

/// A trace buffer's state (`struct pt_ctx`).
#[derive(Debug)]
struct PtCtx {
    /// The hwt context's ident and the buffer, which name it.
    ident: i32,
    buf: BufId,
    /// The id of its BUFFER records: the CPU or the thread id.
    id: i32,
    /// The PT component as XSAVES left it, read by the NMI handler.
    save: [AtomicU64; 9],
    /// Whether the next configure starts the output at the beginning.
    fresh: AtomicU32,
    /// The ToPA tables (one page each, chained).
    topa: PageObject,
    /// Buffer size in bytes.
    size: u64,
    /// Bytes into the buffer where the unit writes next.
    offset: AtomicU64,
    /// The CPU whose unit traces for it now, or [`NO_CPU`].
    cpu: AtomicU32,
    sink: RecordSink,
}

const NO_CPU: u32 = u32::MAX;

impl PtCtx {
    fn state(&self) -> PtState {
        let mut s = [0u64; 9];
        for (d, v) in s.iter_mut().zip(self.save.iter()) {
            *d = v.load(Ordering::Relaxed);
        }
        s
    }

    fn set_state(&self, s: &PtState) {
        for (v, &x) in self.save.iter().zip(s.iter()) {
            v.store(x, Ordering::Relaxed);
        }
    }

    /// `pt_update_buffer`: the output position from OUTPUT_MASK_PTRS.
    fn update_offset(&self, mask_ptrs: u64) {
        let entry = (mask_ptrs & PT_TOPA_PAGE_MASK) >> PT_TOPA_PAGE_SHIFT;
        // Chained tables: each holds TOPA_ENTRIES - 1 buffer pages.
        let table = self.topa_table_of(self.state()[area::OUTPUT_BASE]);
        let page = table * (TOPA_ENTRIES as u64 - 1) + entry;
        let offset = page * PAGE_SIZE as u64 + (mask_ptrs >> 32);
        self.offset
            .store(offset % self.size.max(1), Ordering::Release);
    }

    /// Which of the chained tables starts at physical address `base`.
    fn topa_table_of(&self, base: u64) -> u64 {
        (0..self.topa.npages())
            .find(|&i| self.topa.phys(i) == base)
            .unwrap_or(0) as u64
    }
}

/// `pt_topa_prepare`: tables whose entries are the buffer's pages, each a
/// 4 KiB region with INT, chained by END entries, the last leading back
/// to the first.
fn topa_prepare(pages: &PageObject, wait: Wait) -> KResult<PageObject> {
    let npages = pages.npages();
    let per_table = TOPA_ENTRIES - 1;
    let ntables = npages.div_ceil(per_table).max(1);
    let topa = PageObject::alloc(ntables, wait)?;
    for t in 0..ntables {
        let first = t * per_table;
        let count = per_table.min(npages - first);
        let mut table = [0u8; PAGE_SIZE];
        for i in 0..count {
            let e = pages.phys(first + i) | TOPA_INT;
            table[i * 8..i * 8 + 8].copy_from_slice(&e.to_ne_bytes());
        }
        let next = topa.phys((t + 1) % ntables) | TOPA_END;
        table[count * 8..count * 8 + 8].copy_from_slice(&next.to_ne_bytes());
        topa.write(t * PAGE_SIZE, &table);
    }
    Ok(topa)
}

/// One CPU's unit (`struct pt_cpu`).
#[derive(Debug)]
struct PtCpu {
    /// The context tracing on this CPU, for the NMI handler.
    active: NmiSlot<PtCtx>,
    /// The context configure prepared for the next enable here.
    prepared: SpinMutexBox<Option<KArc<PtCtx>>>,
    /// PT_ACTIVE (1) or PT_INACTIVE (0).
    state: AtomicU32,
    in_handler: AtomicU32,
    /// Buffer positions the NMI handler saw, for the software interrupt:
    /// (hwt ident, buffer id, offset).
    notes: SpscRing<(i32, i32, u64), u8>,
}

/// The backend's state.
#[derive(Debug)]
struct Pt {
    info: CpuInfo,
    cpus: KVec<PtCpu>,
    /// Every buffer's context.
    ctxs: SpinMutexBox<KVec<KArc<PtCtx>>>,
    /// The CPU-mode context running (one at a time): its ident plus one,
    /// 0 for none. (FreeBSD keeps a flag, which any CPU-mode context's
    /// teardown clears, even one that never ran.)
    cpu_mode: AtomicU32,
}

impl Pt {
    fn lookup(&self, ident: i32, buf: BufId) -> Option<KArc<PtCtx>> {
        let l = self.ctxs.lock();
        l.iter().find(|c| c.ident == ident && c.buf == buf).cloned()
    }

    /// Adds a context; the table grows outside its spin lock.
    fn insert(&self, ctx: KArc<PtCtx>, wait: Wait) -> KResult<()> {
        let mut ctx = Some(ctx);
        loop {
            let need = {
                let mut l = self.ctxs.lock();
                if l.spare_capacity() > 0 {
                    if let Some(c) = ctx.take() {
                        let _ = l.push_within_capacity(c);
                    }
                    return Ok(());
                }
                l.len() * 2 + 1
            };
            let mut bigger = KVec::with_capacity(need, wait)?;
            let old = {
                let mut l = self.ctxs.lock();
                if l.spare_capacity() == 0 && bigger.capacity() > l.len() {
                    for c in l.iter() {
                        let _ = bigger.push_within_capacity(c.clone());
                    }
                    Some(core::mem::replace(&mut *l, bigger))
                } else {
                    None
                }
            };
            drop(old);
        }
    }

    /// Removes the contexts `keep` refuses; they are freed after the lock.
    fn remove(&self, mut gone: impl FnMut(&PtCtx) -> bool) {
        let mut removed = KVec::new();
        {
            let mut l = self.ctxs.lock();
            let mut i = 0;
            while i < l.len() {
                if gone(&l[i]) {
                    let c = l.swap_remove(i);
                    if removed.push_within_capacity(c.clone()).is_err() {
                        // No room to carry it out: leave it for later.
                        let _ = l.push_within_capacity(c);
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        }
        drop(removed);
    }

    /// `pt_init_ctx`: a context for buffer `buf` of `hctx`.
    fn new_ctx(
        &self,
        hctx: &HwtContext,
        buf: BufId,
        pages: &PageObject,
        wait: Wait,
    ) -> KResult<()> {
        let topa = topa_prepare(pages, wait)?;
        let id = match buf {
            BufId::Cpu(c) => c as i32,
            BufId::Thread(t) => t,
        };
        let ctx = KArc::try_new(
            PtCtx {
                ident: hctx.ident(),
                buf,
                id,
                save: Default::default(),
                fresh: AtomicU32::new(1),
                topa,
                size: pages.len() as u64,
                offset: AtomicU64::new(0),
                cpu: AtomicU32::new(NO_CPU),
                sink: hctx.record_sink(),
            },
            wait,
        )?;
        self.insert(ctx, wait)
    }

    /// `pt_cpu_start` on the current CPU, which is `cpu`.
    fn cpu_start(&self, cpu: u32, ctx: &KArc<PtCtx>) {
        let c = &self.cpus[cpu as usize];
        let old = c.active.replace(Some(ctx.clone()));
        ctx.cpu.store(cpu, Ordering::Relaxed);
        c.state.store(1, Ordering::SeqCst);
        kpi::x86::wrmsr(MSR_IA32_RTIT_STATUS, 0);
        kpi::x86::xrstors_pt(&ctx.state());
        drop(old);
    }

    /// `pt_cpu_stop` on the current CPU, which is `cpu`: waits for its
    /// NMI handler, saves the state (the unit stops) and the position.
    fn cpu_stop(&self, cpu: u32) {
        let c = &self.cpus[cpu as usize];
        c.state.store(0, Ordering::SeqCst);
        while c.in_handler.load(Ordering::Acquire) != 0 {
            kpi::cpu::spinwait();
        }
        let old = c.active.replace(None);
        if let Some(ctx) = &old {
            let s = kpi::x86::xsaves_pt();
            ctx.set_state(&s);
            ctx.update_offset(s[area::OUTPUT_MASK_PTRS]);
            ctx.cpu.store(NO_CPU, Ordering::Relaxed);
        }
        drop(old);
    }

    /// The ToPA PMI (`pt_topa_intr`), in NMI context on the current CPU.
    fn topa_intr(&self, swi: SwiHandle) -> bool {
        let cpu = kpi::cpu::curcpu();
        let status = kpi::x86::rdmsr(MSR_IA_GLOBAL_STATUS);
        if status & GLOBAL_STATUS_FLAG_TRACETOPAPMI == 0 {
            return false;
        }
        let Some(c) = self.cpus.get(cpu as usize) else {
            return false;
        };
        if c.state.load(Ordering::SeqCst) != 1 {
            kpi::x86::wrmsr(MSR_IA_GLOBAL_STATUS_RESET, GLOBAL_STATUS_FLAG_TRACETOPAPMI);
            kpi::x86::lapic_reenable_pcint();
            return true;
        }
        c.in_handler.store(1, Ordering::Release);
        c.active.with(|ctx| {
            if let Some(ctx) = ctx {
                let s = kpi::x86::xsaves_pt();
                ctx.set_state(&s);
                ctx.update_offset(s[area::OUTPUT_MASK_PTRS]);
                kpi::x86::wrmsr(MSR_IA_GLOBAL_STATUS_RESET, GLOBAL_STATUS_FLAG_TRACETOPAPMI);
                let note = (ctx.ident, ctx.id, ctx.offset.load(Ordering::Acquire));
                // A full ring drops the note: a later one tells the
                // position anyway.
                let _ = c.notes.produce(|n, _| *n = note);
                swi.schedule();
                kpi::x86::xrstors_pt(&s);
            } else {
                kpi::x86::wrmsr(MSR_IA_GLOBAL_STATUS_RESET, GLOBAL_STATUS_FLAG_TRACETOPAPMI);
            }
        });
        kpi::x86::lapic_reenable_pcint();
        c.in_handler.store(0, Ordering::Release);
        true
    }

    /// The software interrupt (`pt_send_buffer_record`): each position the
    /// NMI handler saw becomes a BUFFER record of its context.
    fn send_buffer_records(&self) {
        for c in self.cpus.iter() {
            loop {
                let note = {
                    let mut cons = c.notes.consumer();
                    let n = cons.with(0, |n, _| *n);
                    if n.is_some() {
                        cons.pop();
                    }
                    n
                };
                let Some((ident, id, offset)) = note else {
                    break;
                };
                let sink = {
                    let l = self.ctxs.lock();
                    l.iter()
                        .find(|x| x.ident == ident && x.id == id)
                        .map(|x| x.sink.clone())
                };
                if let Some(sink) = sink {
                    sink.record_buffer(
                        id,
                        (offset / PAGE_SIZE as u64) as i32,
                        offset % PAGE_SIZE as u64,
                    );
                }
            }
        }
    }

    /// `pt_configure_ranges`.
    fn configure_ranges(&self, s: &mut PtState, cfg: &PtCpuConfig) -> KResult<()> {
        if self.info.l0_ebx & CPUPT_IPF == 0 {
            return Err(ENXIO);
        }
        let supported = (self.info.l1_eax & CPUPT_NADDR_M).min(PT_IP_FILTER_MAX_RANGES as u32);
        let n = (cfg.nranges.max(0) as u32).min(supported);
        if cfg.nranges < 0 || n == 0 {
            return Err(EINVAL);
        }
        if n >= 2 {
            s[area::CTL] |= 1 << rtit_ctl_addr_cfg_s(1);
            s[area::ADDR1_A] = cfg.ip_ranges[1].start as u64;
            s[area::ADDR1_B] = cfg.ip_ranges[1].end as u64;
        }
        s[area::CTL] |= 1 << rtit_ctl_addr_cfg_s(0);
        s[area::ADDR0_A] = cfg.ip_ranges[0].start as u64;
        s[area::ADDR0_B] = cfg.ip_ranges[0].end as u64;
        Ok(())
    }
}

/// The backend as hwt(4) calls it.
struct PtBackend {
    pt: KArc<Pt>,
}

impl HwtBackend for PtBackend {
    fn ops(&self) -> BackendOps {
        BackendOps::STOP | BackendOps::SMP | BackendOps::THREAD_DATA
    }

    fn init(&self, ctx: &HwtContext) -> KResult<()> {
        if !ctx.cpu_mode() {
            return Ok(());
        }
        for cpu in ctx.cpu_map().iter() {
            let buf = BufId::Cpu(cpu);
            let pages = ctx.pages(buf).ok_or(ENOENT)?;
            self.pt.new_ctx(ctx, buf, &pages, Wait::WaitOk)?;
        }
        Ok(())
    }

    fn deinit(&self, ctx: &HwtContext) {
        if ctx.cpu_mode() {
            let _ = self.disable_smp(ctx);
        }
        let ident = ctx.ident();
        self.pt.remove(|c| c.ident == ident);
    }

    fn configure(&self, ctx: &HwtContext, cpu_id: u32, buf: BufId) -> KResult<()> {
        let pctx = self.pt.lookup(ctx.ident(), buf).ok_or(ENOENT)?;
        let cfg =
            ctx.with_config(|c| c.and_then(|(bytes, _version)| PtCpuConfig::read_from(bytes)));
        // FreeBSD dereferences a missing configuration; hwt(8) always
        // sets one (and a size up to a page, of which the first 72 bytes
        // count).
        let cfg = cfg.ok_or(EINVAL)?;
        let ctl = cfg.rtit_ctl & PT_SUPPORTED_FLAGS;
        let ebx = self.pt.info.l0_ebx;
        if (ctl & RTIT_CTL_MTCEN != 0 && ebx & CPUPT_MTC == 0)
            || (ctl & RTIT_CTL_CR3FILTER != 0 && ebx & CPUPT_CR3 == 0)
            || (ctl & RTIT_CTL_DIS_TNT != 0 && ebx & CPUPT_DIS_TNT == 0)
        {
            return Err(ENXIO);
        }
        let mut s = pctx.state();
        s[area::CTL] = ctl;
        if cfg.nranges != 0 {
            self.pt.configure_ranges(&mut s, &cfg)?;
        }
        s[area::CTL] |= RTIT_CTL_TOPA | RTIT_CTL_TRACEEN;
        if pctx.fresh.swap(0, Ordering::Relaxed) != 0 {
            // The first run starts at the buffer's start; later ones go on
            // where XSAVES left the output.
            s[area::OUTPUT_BASE] = pctx.topa.phys(0);
            s[area::OUTPUT_MASK_PTRS] = PT_TOPA_MASK_PTRS;
            s[area::STATUS] = 0;
        }
        pctx.set_state(&s);
        let old = self.pt.cpus[cpu_id as usize].prepared.lock().replace(pctx);
        drop(old);
        Ok(())
    }

    fn enable(&self, ctx: &HwtContext, cpu_id: u32) {
        if ctx.cpu_mode() {
            return;
        }
        kpi::kassert!(
            kpi::cpu::curcpu() == cpu_id,
            "PT enabled on CPU {cpu_id} from CPU {}",
            kpi::cpu::curcpu()
        );
        // The context configure prepared on this CPU just before.
        let pctx = self.pt.cpus[cpu_id as usize].prepared.lock().take();
        if let Some(pctx) = pctx {
            self.pt.cpu_start(cpu_id, &pctx);
        }
    }

    fn disable(&self, ctx: &HwtContext, cpu_id: u32) {
        if ctx.cpu_mode() {
            return;
        }
        kpi::kassert!(
            kpi::cpu::curcpu() == cpu_id,
            "PT disabled on CPU {cpu_id} from CPU {}",
            kpi::cpu::curcpu()
        );
        self.pt.cpu_stop(cpu_id);
    }

    fn read(&self, ctx: &HwtContext, buf: BufId) -> KResult<BufPtr> {
        let pctx = self.pt.lookup(ctx.ident(), buf).ok_or(ENOENT)?;
        let offset = pctx.offset.load(Ordering::Acquire);
        Ok(BufPtr {
            ident: (offset / PAGE_SIZE as u64) as i32,
            offset: offset % PAGE_SIZE as u64,
            data: 0,
        })
    }

    fn stop(&self, ctx: &HwtContext) -> KResult<()> {
        if ctx.cpu_mode() {
            return self.disable_smp(ctx);
        }
        // Threads running now: stop the unit of their CPU there.
        let ident = ctx.ident();
        let running: KVec<KArc<PtCtx>> = {
            let mut v = KVec::new();
            let n = self.pt.ctxs.lock().len();
            v.try_reserve(n, Wait::WaitOk)?;
            let l = self.pt.ctxs.lock();
            for c in l.iter().filter(|c| c.ident == ident) {
                if c.cpu.load(Ordering::Relaxed) != NO_CPU {
                    let _ = v.push_within_capacity(c.clone());
                }
            }
            v
        };
        for c in running.iter() {
            let cpu = c.cpu.load(Ordering::Relaxed);
            if cpu == NO_CPU {
                continue;
            }
            let _bind = kpi::cpu::bind(cpu);
            let _crit = kpi::sync::CriticalSection::enter();
            let on_cpu = self.pt.cpus[cpu as usize]
                .active
                .with(|a| a.is_some_and(|a| KArc::ptr_eq(a, c)));
            if on_cpu {
                self.pt.cpu_stop(cpu);
            }
        }
        Ok(())
    }

    fn enable_smp(&self, ctx: &HwtContext) -> KResult<()> {
        let me = ctx.ident() as u32 + 1;
        if self
            .pt
            .cpu_mode
            .compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(EBUSY);
        }
        for cpu in ctx.cpu_map().iter() {
            if !kpi::cpu::is_active(cpu) {
                continue;
            }
            let Some(pctx) = self.pt.lookup(ctx.ident(), BufId::Cpu(cpu)) else {
                continue;
            };
            let _bind = kpi::cpu::bind(cpu);
            let _crit = kpi::sync::CriticalSection::enter();
            self.pt.cpu_start(cpu, &pctx);
        }
        Ok(())
    }

    fn disable_smp(&self, ctx: &HwtContext) -> KResult<()> {
        let me = ctx.ident() as u32 + 1;
        if self
            .pt
            .cpu_mode
            .compare_exchange(me, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            // Not the context that runs.
            return Ok(());
        }
        for cpu in ctx.cpu_map().iter() {
            let mine = self.pt.lookup(ctx.ident(), BufId::Cpu(cpu));
            let Some(pctx) = mine else { continue };
            if pctx.cpu.load(Ordering::Relaxed) != cpu {
                continue;
            }
            let _bind = kpi::cpu::bind(cpu);
            let _crit = kpi::sync::CriticalSection::enter();
            self.pt.cpu_stop(cpu);
        }
        Ok(())
    }

    fn thread_alloc(&self, ctx: &HwtContext, thread_id: i32, pages: &PageObject) -> KResult<()> {
        self.pt
            .new_ctx(ctx, BufId::Thread(thread_id), pages, Wait::NoWait)
    }

    fn thread_free(&self, ctx: &HwtContext, thread_id: i32) {
        let ident = ctx.ident();
        self.pt
            .remove(|c| c.ident == ident && c.buf == BufId::Thread(thread_id));
    }
}

/// The loaded backend; dropping it unregisters it (MOD_UNLOAD): the
/// backend first, then the NMI handler, the PMC LVT entry's use, and the
/// software interrupt the handler schedules.
///
/// `R` is the registration with hwt(4), which ends when dropped: hwt's
/// [`BackendTag`] when both are in one program (the simulator), or what
/// the module glue makes of hwt.ko's exported entry points.
#[derive(Debug)]
pub struct Module<R = BackendTag> {
    tag: Option<R>,
    nmi: Option<NmiHandler>,
    pcint: Option<Pcint>,
    swi: Option<Swi>,
}

/// A use of the PMC LVT entry (`lapic_enable_pcint`), given back
/// (`lapic_disable_pcint`) when dropped, as pt.c's `pt_deinit` does.
#[derive(Debug)]
struct Pcint;

impl Pcint {
    fn enable() -> KResult<Pcint> {
        if kpi::x86::lapic_enable_pcint() {
            Ok(Pcint)
        } else {
            Err(ENXIO)
        }
    }
}

impl Drop for Pcint {
    fn drop(&mut self) {
        kpi::x86::lapic_disable_pcint();
    }
}

/// Why the unit cannot be used (`pt_supported`): ENXIO.
fn supported() -> KResult<CpuInfo> {
    let l1 = kpi::x86::cpuid(1, 0);
    let l7 = kpi::x86::cpuid(7, 0);
    let xs = kpi::x86::cpuid(0xd, 1);
    if l7[1] & CPUID_STDEXT_PROCTRACE == 0
        || l1[2] & CPUID2_XSAVE == 0
        || xs[2] & XFEATURE_ENABLED_PT == 0
        || xs[0] & (CPUID_EXTSTATE_XSAVEC | CPUID_EXTSTATE_XSAVES)
            != (CPUID_EXTSTATE_XSAVEC | CPUID_EXTSTATE_XSAVES)
    {
        return Err(ENXIO);
    }
    let l0 = kpi::x86::cpuid(CPUID_PT_LEAF, 0);
    if l0[2] & (CPUPT_TOPA | CPUPT_TOPA_MULTI) != (CPUPT_TOPA | CPUPT_TOPA_MULTI) {
        return Err(ENXIO);
    }
    let l1 = kpi::x86::cpuid(CPUID_PT_LEAF, 1);
    Ok(CpuInfo {
        l0_ebx: l0[1],
        l1_eax: l1[0],
    })
}

/// The name the backend registers with hwt(4) under.
pub const BACKEND_NAME: &str = "pt";
/// The backend needs the buffers mapped in the kernel (`kva_req`).
pub const BACKEND_KVA_REQ: bool = true;

impl Module {
    /// MOD_LOAD: ENXIO on a CPU without Intel PT, ToPA output with
    /// several entries, or XSAVES of the PT component; then the backend
    /// registers with hwt(4) as "pt".
    pub fn load(hwt: &hwt::Module) -> KResult<Module> {
        Module::load_with(|name, kva_req, ops| hwt.register_backend(name, kva_req, ops))
    }
}

impl<R> Module<R> {
    /// MOD_LOAD as [`Module::load`], registering through `register`
    /// (called once, last, with [`BACKEND_NAME`], [`BACKEND_KVA_REQ`] and
    /// the backend), whose result ends the registration when dropped.
    pub fn load_with(
        register: impl FnOnce(&'static str, bool, kpi::malloc::KBox<dyn HwtBackend>) -> KResult<R>,
    ) -> KResult<Module<R>> {
        let info = supported()?;
        let ncpu = kpi::cpu::ncpu_ids() as usize;
        let cpus = KVec::try_from_fn(ncpu, Wait::WaitOk, |i| {
            Ok(PtCpu {
                active: NmiSlot::new(i as u32),
                prepared: SpinMutex::new(c"pt prepared", None, Wait::WaitOk)?,
                state: AtomicU32::new(0),
                in_handler: AtomicU32::new(0),
                notes: SpscRing::new(c"pt notes", 64, 0, Wait::WaitOk)?,
            })
        })?;
        let pt = KArc::try_new(
            Pt {
                info,
                cpus,
                ctxs: SpinMutex::new(c"pt ctxs", KVec::new(), Wait::WaitOk)?,
                cpu_mode: AtomicU32::new(0),
            },
            Wait::WaitOk,
        )?;
        let for_swi = pt.clone();
        let swi = Swi::add(
            "pt",
            kpi::kbox_dyn!(
                move || for_swi.send_buffer_records(),
                Wait::WaitOk,
                dyn Fn() + Send + Sync
            )?,
        )?;
        let (for_nmi, handle) = (pt.clone(), swi.handle());
        let nmi = NmiHandler::register(kpi::kbox_dyn!(
            move || for_nmi.topa_intr(handle),
            Wait::WaitOk,
            dyn Fn() -> bool + Send + Sync
        )?)?;
        let pcint = Pcint::enable()?;
        let ops = kpi::kbox_dyn!(PtBackend { pt }, Wait::WaitOk, dyn HwtBackend)?;
        let tag = register(BACKEND_NAME, BACKEND_KVA_REQ, ops)?;
        Ok(Module {
            tag: Some(tag),
            nmi: Some(nmi),
            pcint: Some(pcint),
            swi: Some(swi),
        })
    }
}

impl<R> Drop for Module<R> {
    fn drop(&mut self) {
        self.tag.take();
        self.nmi.take();
        self.pcint.take();
        self.swi.take();
    }
}

/// Buffer pages a one-page ToPA table names (its END entry aside).
pub const TOPA_BUFFER_PAGES_PER_TABLE: usize = TOPA_ENTRIES - 1;

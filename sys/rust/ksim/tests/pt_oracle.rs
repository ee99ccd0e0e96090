//! The Intel PT model judged by Intel's own decoder: real programs run on
//! the machine while a harness plays FreeBSD's pt(4) driver (ToPA tables
//! and output pages in physical memory, RTIT MSRs written with `wrmsr`,
//! XRSTORS at switch-in and XSAVES at switch-out for thread mode, the ToPA
//! PMI serviced in the NMI handler), a subscriber records the exact user
//! instructions the traced thread retired, and libipt (through `ipt`)
//! decodes the buffer with the programs' ELF files as the image: the
//! decoded instruction addresses must be the executed ones, in order.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ksim::cpu::Arch;
use ksim::cpu::events::{Mode, Retired, Subscriber};
use ksim::physmem::{ObjId, PAGE_SIZE, PhysMem};
use ksim::programs;
use ksim::user_process::{UserProcess, UserThread};
use ksim::x86::pt::{ctl, msr, topa};
use ksim::{CpuState, Cred, Machine, MachineConfig};

/// Skylake client: family 6, model 0x5E, stepping 3.
const CPU_KEY: &str = "GenuineIntel-6-5E-3";
const IA32_PERF_GLOBAL_STATUS: u32 = 0x38E;
const IA32_PERF_GLOBAL_STATUS_RESET: u32 = 0x390;
const TOPA_PMI: u64 = 1 << 55;

fn machine(insns_per_tick: u64) -> Machine {
    Machine::new(MachineConfig {
        cpus: vec![CpuState::Online; 2],
        insns_per_tick,
        cpuid: CPU_KEY.into(),
        ..MachineConfig::default()
    })
}

/// The user instructions a thread retired.
#[derive(Default)]
struct Recorder {
    pcs: Vec<u64>,
}

impl Subscriber for Recorder {
    fn retired(&mut self, insn: &Retired<'_>) {
        if insn.mode == Mode::User {
            self.pcs.push(insn.pc);
        }
    }
}

/// A trace buffer: ToPA table and output pages, read back as a consumer
/// does (the driver's PMI handler, and the end of the trace).
struct Buffer {
    mem: Arc<PhysMem>,
    table: ObjId,
    pages: ObjId,
    npages: usize,
    /// The consumer's position in the ring.
    taken: u64,
    data: Vec<u8>,
}

impl Buffer {
    /// `npages` 4K entries, INT on every `int_every`th (0: none), with an
    /// END entry back to the table's start (a ring, as FreeBSD's pt.c
    /// makes it).
    fn new(mem: &Arc<PhysMem>, npages: usize, int_every: usize) -> Buffer {
        assert!(npages < 511, "a one-page table");
        let pages = mem.alloc_object(npages, false).unwrap();
        let table = mem.alloc_object(1, true).unwrap();
        for i in 0..npages {
            let mut e = mem.page_paddr(pages, i).unwrap();
            if int_every != 0 && (i + 1) % int_every == 0 {
                e |= topa::INT;
            }
            mem.write_object(table, i * 8, &e.to_le_bytes()).unwrap();
        }
        let end = mem.page_paddr(table, 0).unwrap() | topa::END;
        mem.write_object(table, npages * 8, &end.to_le_bytes())
            .unwrap();
        Buffer {
            mem: mem.clone(),
            table,
            pages,
            npages,
            taken: 0,
            data: Vec::new(),
        }
    }

    fn table_paddr(&self) -> u64 {
        self.mem.page_paddr(self.table, 0).unwrap()
    }

    /// Takes what the producer wrote up to OUTPUT_MASK_PTRS `ptrs` (the
    /// consumer is never a whole ring behind: INT entries see to it).
    fn take(&mut self, ptrs: u64) {
        let size = self.npages as u64 * PAGE_SIZE;
        let entry = (ptrs >> 7) & 0x1FF_FFFF;
        let pos = (entry * PAGE_SIZE + (ptrs >> 32)) % size;
        while self.taken != pos {
            let n = if pos > self.taken {
                pos - self.taken
            } else {
                size - self.taken
            };
            let mut chunk = vec![0u8; n as usize];
            self.mem
                .read_object(self.pages, self.taken as usize, &mut chunk)
                .unwrap();
            self.data.extend_from_slice(&chunk);
            self.taken = (self.taken + n) % size;
        }
    }

    fn free(&self) {
        self.mem.free_object(self.pages).unwrap();
        self.mem.free_object(self.table).unwrap();
    }
}

/// One traced thread: its saved PT state (the XSAVE area's component) and
/// its buffer.
struct Traced {
    state: [u64; 9],
    buf: Arc<Mutex<Buffer>>,
}

impl Traced {
    fn new(buf: Buffer, rtit_ctl: u64, filter: &[(u64, u64)], cr3_match: u64) -> Traced {
        let mut state = [0u64; 9];
        state[0] = rtit_ctl | ctl::TRACEEN | ctl::TOPA;
        state[1] = buf.table_paddr();
        state[2] = 0x7F;
        state[4] = cr3_match;
        for (n, &(a, b)) in filter.iter().enumerate() {
            state[5 + 2 * n] = a;
            state[6 + 2 * n] = b;
        }
        Traced {
            state,
            buf: Arc::new(Mutex::new(buf)),
        }
    }

    fn trace(&self) -> Vec<u8> {
        self.buf.lock().unwrap().data.clone()
    }
}

/// The harness that plays FreeBSD's pt(4) in thread mode.
struct Driver {
    m: Machine,
    mem: Arc<PhysMem>,
    /// The buffer of the thread traced on each CPU, for the PMI handler.
    on_cpu: Arc<Mutex<[Option<Arc<Mutex<Buffer>>>; 2]>>,
    pmis: Arc<Mutex<u64>>,
    per_tick: u64,
}

impl Driver {
    /// The machine must be entered.
    fn new(m: &Machine, per_tick: u64) -> Driver {
        let on_cpu: Arc<Mutex<[Option<Arc<Mutex<Buffer>>>; 2]>> = Arc::default();
        let pmis = Arc::new(Mutex::new(0u64));
        let (slots, count) = (on_cpu.clone(), pmis.clone());
        ksim::kern::set_pmc_intr(Some(Arc::new(move || {
            let status = ksim::kern::rdmsr(IA32_PERF_GLOBAL_STATUS);
            if status & TOPA_PMI == 0 {
                return false;
            }
            *count.lock().unwrap() += 1;
            let cpu = ksim::kern::curcpu() as usize;
            if let Some(buf) = &slots.lock().unwrap()[cpu] {
                let ptrs = ksim::kern::rdmsr(msr::OUTPUT_MASK_PTRS);
                buf.lock().unwrap().take(ptrs);
            }
            ksim::kern::wrmsr(IA32_PERF_GLOBAL_STATUS_RESET, TOPA_PMI);
            ksim::kern::lapic_reenable_pcint();
            true
        })));
        assert!(ksim::kern::lapic_enable_pcint());
        Driver {
            m: m.clone(),
            mem: m.physmem(),
            on_cpu,
            pmis,
            per_tick,
        }
    }

    /// The thread is switched in: XRSTORS of its PT state.
    fn switch_in(&self, cpu: u32, tid: u32, t: &Traced) {
        self.m.switch_in(cpu, tid);
        self.on_cpu.lock().unwrap()[cpu as usize] = Some(t.buf.clone());
        self.m
            .pts()
            .unwrap()
            .restore_state(cpu, &t.state)
            .expect("XRSTORS");
    }

    /// The thread is switched out: XSAVES (which stops tracing), and the
    /// consumer takes what it wrote.
    fn switch_out(&self, cpu: u32, t: &mut Traced) {
        t.state = self.m.pts().unwrap().save_state(cpu);
        assert_ne!(t.state[0] & ctl::TRACEEN, 0, "saved while tracing");
        t.buf.lock().unwrap().take(t.state[2]);
        self.on_cpu.lock().unwrap()[cpu as usize] = None;
        self.m.switch_out(cpu);
    }

    /// Spawns `name` with `argv`, its main thread's instructions recorded.
    fn spawn(&self, name: &str, argv: &[&str]) -> (u32, u32, Arc<Mutex<Recorder>>) {
        let image = programs::image(Arch::X86_64, name).expect("the ksim build made the programs");
        let (pid, tid) = self.m.spawn(Cred::root(), name);
        let path = format!("/usr/bin/{name}");
        let mut process = UserProcess::exec(&image, &path, argv, &[], pid as i32, 0).expect("exec");
        let rec = Arc::new(Mutex::new(Recorder::default()));
        process
            .cpu()
            .subscribe(Box::new(rec.clone()))
            .expect("subscribe");
        self.m
            .exec_user_thread(pid, &path, &image, UserThread::new(process, self.per_tick));
        (pid, tid, rec)
    }

    fn alive(&self, pid: u32) -> bool {
        self.m.proc_info(pid).is_some_and(|p| !p.zombie)
    }

    /// Runs `pid`'s threads on CPU 0, `slice` ticks at a time, tracing
    /// its main thread `tid` with `t`, until it exits.
    fn run(&self, pid: u32, tid: u32, t: &mut Traced, slice: u32) {
        let mut turn = 0;
        for _ in 0..100_000 {
            if !self.alive(pid) {
                return;
            }
            let threads = self.m.proc_info(pid).unwrap().threads;
            let next = threads[turn % threads.len()];
            turn += 1;
            let traced = next == tid;
            if traced {
                self.switch_in(0, next, t);
            } else {
                self.m.switch_in(0, next);
            }
            for _ in 0..slice {
                self.m.tick(0);
                if !self.alive(pid) {
                    break;
                }
            }
            if traced {
                self.switch_out(0, t);
            } else {
                self.m.switch_out(0);
            }
        }
        panic!("{pid} did not exit");
    }

    fn pmis(&self) -> u64 {
        *self.pmis.lock().unwrap()
    }

    /// At the end: nothing written outside the buffers, none left.
    fn check_clean(&self, bufs: &[&Traced]) {
        assert_eq!(self.mem.stray_writes(), 0, "{:?}", self.mem.stray_log());
        for t in bufs {
            t.buf.lock().unwrap().free();
        }
        assert_eq!(self.mem.live_objects(), 0);
    }
}

/// The ELF file's executable PT_LOAD segments: (offset, filesz, vaddr).
fn text_segments(elf: &[u8]) -> Vec<(u64, u64, u64)> {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let phoff = u64_at(32) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&ph| u32_at(ph) == 1 && u32_at(ph + 4) & 1 != 0)
        .map(|ph| (u64_at(ph + 8), u64_at(ph + 32), u64_at(ph + 16)))
        .collect()
}

/// The address of symbol `name` and its size, from the ELF's .symtab.
fn symbol(elf: &[u8], name: &str) -> (u64, u64) {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let shoff = u64_at(40) as usize;
    let (shentsize, shnum) = (u16_at(58), u16_at(60));
    for i in 0..shnum {
        let sh = shoff + i * shentsize;
        if u32_at(sh + 4) != 2 {
            continue;
        }
        let (off, size) = (u64_at(sh + 24) as usize, u64_at(sh + 32) as usize);
        let strtab = shoff + u32_at(sh + 40) * shentsize;
        let str_off = u64_at(strtab + 24) as usize;
        for s in (off..off + size).step_by(24) {
            let n = str_off + u32_at(s);
            let end = n + elf[n..].iter().position(|&b| b == 0).unwrap();
            if &elf[n..end] == name.as_bytes() {
                return (u64_at(s + 8), u64_at(s + 16));
            }
        }
    }
    panic!("no symbol {name}");
}

/// Writes `bytes` to a file of this test run, for libipt's image.
fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ksim-pt-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// An ELF image for the decoder: its text segments at `bias` + vaddr in
/// the address space `cr3` (None: all).
struct ElfImage {
    path: PathBuf,
    segments: Vec<(u64, u64, u64)>,
    bias: u64,
    cr3: Option<u64>,
}

impl ElfImage {
    fn new(name: &str, elf: &[u8], bias: u64, cr3: Option<u64>) -> ElfImage {
        ElfImage {
            path: temp_file(name, elf),
            segments: text_segments(elf),
            bias,
            cr3,
        }
    }
}

fn decode(
    trace: &[u8],
    images: &[ElfImage],
    filter: Option<(u64, &[(u64, u64)])>,
) -> Vec<ipt::Item> {
    let mut cfg = ipt::Config::new(trace)
        .cpu(6, 0x5E, 3)
        .expect("libipt knows Skylake");
    if let Some((cfg_bits, ranges)) = filter {
        cfg = cfg.addr_filter(cfg_bits, ranges);
    }
    let mut image = ipt::Image::new("ksim");
    for im in images {
        for &(off, size, vaddr) in &im.segments {
            image
                .add_file_in(&im.path, off, size, im.bias + vaddr, im.cr3)
                .expect("pt_image_add_file");
        }
    }
    let mut dec = ipt::InsnDecoder::new(&cfg, &mut image).expect("decoder");
    dec.decode_all()
}

fn insns(items: &[ipt::Item]) -> Vec<u64> {
    items
        .iter()
        .filter_map(|i| match i {
            ipt::Item::Insn(insn) => Some(insn.ip),
            _ => None,
        })
        .collect()
}

fn lost(items: &[ipt::Item]) -> Vec<&ipt::Item> {
    items
        .iter()
        .filter(|i| matches!(i, ipt::Item::Lost { .. }))
        .collect()
}

/// Asserts two instruction streams are equal, showing where they part.
fn assert_same(what: &str, decoded: &[u64], executed: &[u64]) {
    if decoded == executed {
        return;
    }
    let at = decoded
        .iter()
        .zip(executed)
        .position(|(a, b)| a != b)
        .unwrap_or(decoded.len().min(executed.len()));
    let from = at.saturating_sub(5);
    panic!(
        "{what}: decoded {} instructions, executed {}; first difference at {at}:\n decoded  {:x?}\n executed {:x?}",
        decoded.len(),
        executed.len(),
        &decoded[from..(at + 5).min(decoded.len())],
        &executed[from..(at + 5).min(executed.len())],
    );
}

/// User-mode branch tracing with TSC, PSB every 2K bytes: what FreeBSD's
/// hwt(8) asks for by default.
const USER_TRACE: u64 = ctl::USER | ctl::BRANCHEN | ctl::TSCEN;

/// Traces `name` in thread mode on CPU 0 and decodes it with libipt.
fn trace_program(
    name: &str,
    argv: &[&str],
    per_tick: u64,
    pages: usize,
) -> (Vec<ipt::Item>, Vec<u64>) {
    let m = machine(per_tick);
    let _g = m.enter();
    let d = Driver::new(&m, per_tick);
    let (pid, tid, rec) = d.spawn(name, argv);
    let mut t = Traced::new(Buffer::new(&d.mem, pages, 8), USER_TRACE, &[], 0);
    d.run(pid, tid, &mut t, 3);
    let elf = programs::image(Arch::X86_64, name).unwrap();
    let items = decode(&t.trace(), &[ElfImage::new(name, &elf, 0, None)], None);
    eprintln!(
        "{name}: {} bytes of trace, {} PMIs",
        t.trace().len(),
        d.pmis()
    );
    let executed = rec.lock().unwrap().pcs.clone();
    d.check_clean(&[&t]);
    (items, executed)
}

#[test]
fn each_workload_decodes_to_the_instructions_it_executed() {
    let cases: &[(&str, &[&str])] = &[
        ("calls", &["calls", "300"]),
        ("sort", &["sort", "1"]),
        ("recurse", &["recurse", "200", "2"]),
        ("syscalls", &["syscalls", "40"]),
        ("threads", &["threads", "2", "20"]),
    ];
    for &(name, argv) in cases {
        let (items, executed) = trace_program(name, argv, 5_000, 64);
        assert!(lost(&items).is_empty(), "{name}: {:?}", lost(&items));
        assert!(executed.len() > 1000, "{name}: ran {}", executed.len());
        assert_same(name, &insns(&items), &executed);
        let events = items.len() - executed.len();
        eprintln!("{name}: {} instructions, {events} events", executed.len());
    }
}

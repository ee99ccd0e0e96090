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
use ksim::physmem::{ObjId, PAGE_SIZE, PhysMem};
use ksim::programs;
use ksim::user_process::{UserProcess, UserThread};
use ksim::x86::pt::{IA32_XSS, XSS_PT, ctl, msr, topa};
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
type Recorder = ksim::cpu::events::UserPcs;

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

/// Per CPU, the buffer of the thread traced there.
type OnCpu = Arc<Mutex<[Option<Arc<Mutex<Buffer>>>; 2]>>;

/// The harness that plays FreeBSD's pt(4) in thread mode.
struct Driver {
    m: Machine,
    mem: Arc<PhysMem>,
    /// The buffer of the thread traced on each CPU, for the PMI handler.
    on_cpu: OnCpu,
    pmis: Arc<Mutex<u64>>,
    per_tick: u64,
}

impl Driver {
    /// The machine must be entered.
    fn new(m: &Machine, per_tick: u64) -> Driver {
        let on_cpu: OnCpu = Arc::default();
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
        self.run_all(&mut [(pid, tid, t)], slice, |_| {});
    }

    /// Runs every thread of the processes round-robin on CPU 0, `slice`
    /// ticks at a time, tracing each process's thread `tid` with its
    /// `Traced` (thread mode), until all have exited; `each_tick` sees
    /// the machine after every tick.
    fn run_all(
        &self,
        procs: &mut [(u32, u32, &mut Traced)],
        slice: u32,
        mut each_tick: impl FnMut(&Machine),
    ) {
        for _ in 0..100_000 {
            let mut ran = false;
            for (pid, tid, t) in procs.iter_mut() {
                let Some(info) = self.m.proc_info(*pid).filter(|p| !p.zombie) else {
                    continue;
                };
                for next in info.threads {
                    if !self.alive(*pid) {
                        break;
                    }
                    ran = true;
                    let traced = next == *tid;
                    if traced {
                        self.switch_in(0, next, t);
                    } else {
                        self.m.switch_in(0, next);
                    }
                    for _ in 0..slice {
                        self.m.tick(0);
                        each_tick(&self.m);
                        if !self.alive(*pid) || self.m.running_on(0) != Some(next) {
                            break;
                        }
                    }
                    if traced {
                        self.switch_out(0, t);
                    } else {
                        self.m.switch_out(0);
                    }
                }
            }
            if !ran {
                return;
            }
        }
        panic!("the processes did not exit");
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
    // Unique: libipt maps the files, and another test's rewrite of a
    // mapped file would fault it.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = dir.join(format!("{name}.{n}"));
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

/// A decoder configuration for `trace`, for the machine's CPU (CPUID
/// leaf 1's signature, with libipt's errata for it).
fn config(trace: &[u8]) -> ipt::Config<'_> {
    let model = ksim::x86::CpuModel::from_key(CPU_KEY).unwrap();
    ipt::Config::new(trace)
        .cpu_signature(model.cpuid(1, 0)[0])
        .expect("libipt knows the CPU")
}

impl Drop for ElfImage {
    fn drop(&mut self) {
        // libipt has read (or mapped) it by now; the directory stays for
        // the test's other files.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn decode(
    trace: &[u8],
    images: &[ElfImage],
    filter: Option<(u64, &[(u64, u64)])>,
) -> Vec<ipt::Item> {
    let mut cfg = config(trace);
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
        // Ends at a fault: FUP and TIP.PGD before the faulting instruction.
        ("faults", &["faults", "segv"]),
    ];
    for &(name, argv) in cases {
        let (items, executed) = trace_program(name, argv, 5_000, 64);
        assert!(lost(&items).is_empty(), "{name}: {:?}", lost(&items));
        assert!(executed.len() > 50, "{name}: ran {}", executed.len());
        assert_same(name, &insns(&items), &executed);
        let events = items.len() - executed.len();
        eprintln!("{name}: {} instructions, {events} events", executed.len());
    }
}

#[test]
fn the_topa_pmi_lets_a_small_ring_carry_a_long_trace() {
    let m = machine(5_000);
    let _g = m.enter();
    let d = Driver::new(&m, 5_000);
    let (pid, tid, rec) = d.spawn("calls", &["calls", "300"]);
    // Two pages, INT on each: the trace is several times the ring.
    let mut t = Traced::new(Buffer::new(&d.mem, 2, 1), USER_TRACE, &[], 0);
    d.run(pid, tid, &mut t, 3);
    let trace = t.trace();
    assert!(trace.len() > 3 * 2 * 4096, "{} bytes", trace.len());
    let unit_pmis = m.pts().unwrap().stats(0).pmis;
    assert_eq!(d.pmis(), unit_pmis, "every ToPA PMI reached the handler");
    assert!(d.pmis() >= 6, "{} PMIs", d.pmis());
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let items = decode(&trace, &[ElfImage::new("calls", &elf, 0, None)], None);
    assert!(lost(&items).is_empty(), "{:?}", lost(&items));
    assert_same("calls", &insns(&items), &rec.lock().unwrap().pcs);
    d.check_clean(&[&t]);
}

#[test]
fn a_shared_object_mapped_at_run_time_decodes_with_its_load_address() {
    let m = machine(2_000);
    let _g = m.enter();
    let object = programs::image(Arch::X86_64, programs::SECOND_OBJECT).unwrap();
    m.install(programs::SECOND_OBJECT_PATH, object.clone());
    let d = Driver::new(&m, 2_000);
    let (pid, tid, rec) = d.spawn("mapobj", &["mapobj", "300"]);
    let mut t = Traced::new(Buffer::new(&d.mem, 64, 8), USER_TRACE, &[], 0);
    let mut mapped_at = None;
    d.run_all(&mut [(pid, tid, &mut t)], 3, |m| {
        if let Some(map) = m
            .mappings(pid)
            .iter()
            .find(|map| map.path == programs::SECOND_OBJECT_PATH)
        {
            mapped_at.get_or_insert(map.start);
        }
    });
    let start = mapped_at.expect("the object's text was mapped");
    // The text mapping starts at the load bias plus its segment's page.
    let (_, _, text_vaddr) = text_segments(&object)[0];
    let bias = start - (text_vaddr & !(PAGE_SIZE - 1));
    let elf = programs::image(Arch::X86_64, "mapobj").unwrap();
    let images = [
        ElfImage::new("mapobj", &elf, 0, None),
        ElfImage::new("libsecond.so", &object, bias, None),
    ];
    let items = decode(&t.trace(), &images, None);
    assert!(lost(&items).is_empty(), "{:?}", lost(&items));
    let executed = rec.lock().unwrap().pcs.clone();
    assert!(
        executed
            .iter()
            .any(|&pc| pc >= start && pc < start + 0x10000)
    );
    assert_same("mapobj", &insns(&items), &executed);
    d.check_clean(&[&t]);
}

#[test]
fn two_processes_sharing_a_cpu_each_decode_from_their_own_buffer() {
    let m = machine(3_000);
    let _g = m.enter();
    let d = Driver::new(&m, 3_000);
    let (pa, ta, ra) = d.spawn("calls", &["calls", "200"]);
    let (pb, tb, rb) = d.spawn("sort", &["sort", "1"]);
    let mut a = Traced::new(Buffer::new(&d.mem, 64, 8), USER_TRACE, &[], 0);
    let mut b = Traced::new(Buffer::new(&d.mem, 64, 8), USER_TRACE, &[], 0);
    d.run_all(&mut [(pa, ta, &mut a), (pb, tb, &mut b)], 2, |_| {});
    for (name, t, rec) in [("calls", &a, &ra), ("sort", &b, &rb)] {
        let elf = programs::image(Arch::X86_64, name).unwrap();
        let items = decode(&t.trace(), &[ElfImage::new(name, &elf, 0, None)], None);
        assert!(lost(&items).is_empty(), "{name}: {:?}", lost(&items));
        assert_same(name, &insns(&items), &rec.lock().unwrap().pcs);
    }
    d.check_clean(&[&a, &b]);
}

#[test]
fn cpu_mode_tells_processes_apart_by_pip() {
    let m = machine(3_000);
    let _g = m.enter();
    let d = Driver::new(&m, 3_000);
    let (pa, ta, ra) = d.spawn("calls", &["calls", "100"]);
    let (pb, tb, rb) = d.spawn("recurse", &["recurse", "100", "1"]);
    // One buffer for the CPU, enabled once; OS=1 for PIP (the simulated
    // kernel runs no instructions, so nothing of it is traced).
    let t = Traced::new(Buffer::new(&d.mem, 128, 8), USER_TRACE | ctl::OS, &[], 0);
    let pts = m.pts().unwrap();
    d.on_cpu.lock().unwrap()[0] = Some(t.buf.clone());
    pts.restore_state(0, &t.state).unwrap();
    let mut turn = 0;
    while d.alive(pa) || d.alive(pb) {
        let (pid, tid) = [(pa, ta), (pb, tb)][turn % 2];
        turn += 1;
        if !d.alive(pid) {
            continue;
        }
        m.switch_in(0, tid);
        for _ in 0..2 {
            m.tick(0);
        }
        m.switch_out(0);
    }
    let end = pts.save_state(0);
    t.buf.lock().unwrap().take(end[2]);
    let (cr3a, cr3b) = (m.cr3_of(pa), m.cr3_of(pb));
    assert_ne!(cr3a, cr3b);
    let ea = programs::image(Arch::X86_64, "calls").unwrap();
    let eb = programs::image(Arch::X86_64, "recurse").unwrap();
    let images = [
        ElfImage::new("calls", &ea, 0, Some(cr3a)),
        ElfImage::new("recurse", &eb, 0, Some(cr3b)),
    ];
    let items = decode(&t.trace(), &images, None);
    assert!(lost(&items).is_empty(), "{:?}", lost(&items));
    // Split the decoded instructions by the address space PIP named.
    let (mut da, mut db) = (Vec::new(), Vec::new());
    let mut cur = None;
    let mut switches = 0;
    for item in &items {
        match item {
            ipt::Item::Event(ipt::Event::Paging { cr3 } | ipt::Event::AsyncPaging { cr3, .. }) => {
                switches += u32::from(cur != Some(*cr3));
                cur = Some(*cr3);
            }
            ipt::Item::Insn(i) if cur == Some(cr3a) => da.push(i.ip),
            ipt::Item::Insn(i) if cur == Some(cr3b) => db.push(i.ip),
            ipt::Item::Insn(i) => panic!("{:#x} decoded in no known address space", i.ip),
            _ => {}
        }
    }
    assert!(switches > 4, "{switches} address-space switches");
    assert_same("calls", &da, &ra.lock().unwrap().pcs);
    assert_same("recurse", &db, &rb.lock().unwrap().pcs);
    d.check_clean(&[&t]);
}

#[test]
fn an_ip_filter_traces_only_the_function_in_its_range() {
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    for func in ["run", "f_mix"] {
        let (start, size) = symbol(&elf, func);
        let range = (start, start + size - 1);
        let m = machine(5_000);
        let _g = m.enter();
        let d = Driver::new(&m, 5_000);
        let (pid, tid, rec) = d.spawn("calls", &["calls", "100"]);
        let addr0_cfg_1 = 1 << 32;
        let mut t = Traced::new(
            Buffer::new(&d.mem, 64, 8),
            USER_TRACE | addr0_cfg_1,
            &[range],
            0,
        );
        d.run(pid, tid, &mut t, 3);
        let items = decode(
            &t.trace(),
            &[ElfImage::new("calls", &elf, 0, None)],
            Some((1, &[range])),
        );
        assert!(lost(&items).is_empty(), "{func}: {:?}", lost(&items));
        let inside: Vec<u64> = rec
            .lock()
            .unwrap()
            .pcs
            .iter()
            .copied()
            .filter(|pc| (range.0..=range.1).contains(pc))
            .collect();
        assert!(
            inside.len() > 100,
            "{func}: {} instructions inside",
            inside.len()
        );
        let enables = items
            .iter()
            .filter(|i| matches!(i, ipt::Item::Event(ipt::Event::Enabled { .. })))
            .count();
        assert!(enables > 10, "{func}: TIP.PGE at each entry ({enables})");
        assert_same(func, &insns(&items), &inside);
        d.check_clean(&[&t]);
    }
}

#[test]
fn an_internal_overflow_loses_a_span_and_decoding_resumes_after_ovf() {
    let m = machine(5_000);
    let _g = m.enter();
    let d = Driver::new(&m, 5_000);
    let (pid, tid, rec) = d.spawn("calls", &["calls", "200"]);
    let mut t = Traced::new(Buffer::new(&d.mem, 64, 8), USER_TRACE, &[], 0);
    // 20,000 instructions in, packets are lost for 3,000 instructions.
    m.pts().unwrap().force_overflow(0, 20_000, 3_000);
    d.run(pid, tid, &mut t, 3);
    assert_eq!(m.pts().unwrap().stats(0).overflows, 1);
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let items = decode(&t.trace(), &[ElfImage::new("calls", &elf, 0, None)], None);
    assert!(lost(&items).is_empty(), "{:?}", lost(&items));
    let at = items
        .iter()
        .position(|i| matches!(i, ipt::Item::Event(ipt::Event::Overflow { .. })))
        .expect("an overflow event");
    let executed = rec.lock().unwrap().pcs.clone();
    let before = insns(&items[..at]);
    let after = insns(&items[at..]);
    assert_eq!(
        &executed[..before.len()],
        &before[..],
        "a prefix before OVF"
    );
    let resumed = executed.len() - after.len();
    assert_eq!(&executed[resumed..], &after[..], "a suffix after OVF");
    let gap = resumed - before.len();
    assert!(
        (3_000..20_000).contains(&gap),
        "the lost span is the overflow's ({gap} instructions)"
    );
    d.check_clean(&[&t]);
}

/// Runs `pid` on CPU 0 with its thread `tid` traced with `state`
/// (XRSTORS in, XSAVES out), and no consumer until the end.
fn run_plain(m: &Machine, pid: u32, tid: u32, state: &mut [u64; 9]) {
    let pts = m.pts().unwrap();
    let alive = |pid| {
        m.proc_info(pid)
            .is_some_and(|p: ksim::ProcInfo| !p.zombie && p.threads.contains(&tid))
    };
    while alive(pid) {
        m.switch_in(0, tid);
        pts.restore_state(0, state).unwrap();
        for _ in 0..3 {
            m.tick(0);
            if !alive(pid) {
                break;
            }
        }
        *state = pts.save_state(0);
        m.switch_out(0);
    }
}

#[test]
fn a_lapped_ring_decodes_from_its_first_psb_to_the_end() {
    let m = machine(5_000);
    let _g = m.enter();
    let d = Driver::new(&m, 5_000);
    let (pid, tid, rec) = d.spawn("calls", &["calls", "300"]);
    // No INT entries: nobody drains the four-page ring while it laps.
    let mut t = Traced::new(Buffer::new(&d.mem, 4, 0), USER_TRACE, &[], 0);
    // The consumer only looks at the end, from the producer's position
    // (the oldest byte): a ring's worth, starting mid-packet.
    run_plain(&m, pid, tid, &mut t.state);
    let ring = {
        let b = t.buf.lock().unwrap();
        let ptrs = t.state[2];
        let pos = (((ptrs >> 7) & 0x1FF_FFFF) * PAGE_SIZE + (ptrs >> 32)) as usize;
        let mut all = vec![0u8; 4 * PAGE_SIZE as usize];
        b.mem.read_object(b.pages, 0, &mut all).unwrap();
        let mut ring = all[pos..].to_vec();
        ring.extend_from_slice(&all[..pos]);
        ring
    };
    assert!(
        m.pts().unwrap().stats(0).bytes_out > 8 * 4096,
        "the ring lapped"
    );
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let items = decode(&ring, &[ElfImage::new("calls", &elf, 0, None)], None);
    let executed = rec.lock().unwrap().pcs.clone();
    let got = insns(&items);
    assert!(got.len() > 1000, "{} instructions", got.len());
    let from = executed.len() - got.len();
    assert_same("the ring's tail", &got, &executed[from..]);
    d.check_clean(&[&t]);
}

#[test]
fn a_hole_in_the_trace_is_reported_and_decoding_resyncs_at_the_next_psb() {
    let (m, trace, executed) = {
        let m = machine(5_000);
        let _g = m.enter();
        let d = Driver::new(&m, 5_000);
        let (pid, tid, rec) = d.spawn("calls", &["calls", "200"]);
        let mut t = Traced::new(Buffer::new(&d.mem, 64, 8), USER_TRACE, &[], 0);
        d.run(pid, tid, &mut t, 3);
        let trace = t.trace();
        d.check_clean(&[&t]);
        let pcs = rec.lock().unwrap().pcs.clone();
        (m.clone(), trace, pcs)
    };
    drop(m);
    // 3,000 bytes from a PSB on are damaged (overwritten with an opcode
    // no packet has), as by a consumer that read a region being
    // rewritten.
    let psbs: Vec<usize> = trace
        .windows(16)
        .enumerate()
        .filter(|(_, w)| *w == [0x02, 0x82].repeat(8).as_slice())
        .map(|(i, _)| i)
        .collect();
    assert!(psbs.len() > 6, "{} PSBs", psbs.len());
    let cut = psbs[2];
    let mut holed = trace.clone();
    for b in holed[cut..cut + 3_000].chunks_mut(2) {
        b.copy_from_slice(&[0x02, 0x01][..b.len()]);
    }
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let images = [ElfImage::new("calls", &elf, 0, None)];
    let items = decode(&holed, &images, None);
    let lost_at = items
        .iter()
        .position(|i| matches!(i, ipt::Item::Lost { .. }))
        .expect("libipt reports the damage");
    let ipt::Item::Lost { resync, error, .. } = items[lost_at] else {
        unreachable!()
    };
    let resync = resync.expect("resynchronised") as usize;
    assert!(
        resync >= cut + 3_000,
        "resync at {resync}, after the damage ({error})"
    );
    assert_eq!(
        Some(&resync),
        psbs.iter().find(|&&p| p >= cut + 3_000),
        "at the next PSB"
    );
    assert_eq!(lost(&items).len(), 1);
    // Before the hole: what the bytes before it decode to, alone.
    let head = insns(&decode(&trace[..cut], &images, None));
    let got = insns(&items);
    assert_eq!(&got[..head.len()], &head[..]);
    assert_eq!(&executed[..head.len()], &head[..]);
    // From the resync on: the executed stream's tail.
    let tail = insns(&items[lost_at..]);
    let from = executed.len() - tail.len();
    assert_same("after the resync", &tail, &executed[from..]);
    assert!(from > head.len(), "a span is lost");
}

#[test]
fn single_range_output_holds_the_trace_of_a_small_program() {
    let m = machine(5_000);
    let _g = m.enter();
    let d = Driver::new(&m, 5_000);
    let (pid, tid, rec) = d.spawn("syscalls", &["syscalls", "20"]);
    let page = d.mem.alloc_object(1, false).unwrap();
    let mut state = [0u64; 9];
    state[0] = USER_TRACE | ctl::TRACEEN;
    state[1] = d.mem.page_paddr(page, 0).unwrap();
    state[2] = 0xFFF;
    run_plain(&m, pid, tid, &mut state);
    let len = (state[2] >> 32) as usize;
    assert!(len > 100 && len < 4096, "{len} bytes, no wrap");
    let mut trace = vec![0u8; len];
    d.mem.read_object(page, 0, &mut trace).unwrap();
    let elf = programs::image(Arch::X86_64, "syscalls").unwrap();
    let items = decode(&trace, &[ElfImage::new("syscalls", &elf, 0, None)], None);
    assert!(lost(&items).is_empty(), "{:?}", lost(&items));
    assert_same("syscalls", &insns(&items), &rec.lock().unwrap().pcs);
    d.mem.free_object(page).unwrap();
    assert_eq!(d.mem.stray_writes(), 0);
}

#[test]
fn a_stop_entry_stops_the_trace_with_a_pmi() {
    let m = machine(5_000);
    let _g = m.enter();
    let d = Driver::new(&m, 5_000);
    let (pid, tid, rec) = d.spawn("calls", &["calls", "200"]);
    // Two pages, the second with STOP and INT, and no ring.
    let buf = Buffer::new(&d.mem, 2, 0);
    let second = d.mem.page_paddr(buf.pages, 1).unwrap() | topa::STOP | topa::INT;
    d.mem
        .write_object(buf.table, 8, &second.to_le_bytes())
        .unwrap();
    let mut t = Traced::new(buf, USER_TRACE, &[], 0);
    d.run(pid, tid, &mut t, 3);
    assert_eq!(d.pmis(), 1, "the STOP region's INT");
    assert_ne!(t.state[3] & (1 << 5), 0, "IA32_RTIT_STATUS.Stopped");
    let trace = t.trace();
    assert_eq!(trace.len(), 2 * 4096, "both regions full, nothing more");
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let items = decode(&trace, &[ElfImage::new("calls", &elf, 0, None)], None);
    let got = insns(&items);
    let executed = rec.lock().unwrap().pcs.clone();
    assert!(got.len() > 1000 && got.len() < executed.len() / 2);
    assert_eq!(&executed[..got.len()], &got[..], "a prefix");
    d.check_clean(&[&t]);
}

#[test]
fn cr3_filtering_traces_one_process_of_two_and_disretc_sends_every_return() {
    let m = machine(3_000);
    let _g = m.enter();
    let d = Driver::new(&m, 3_000);
    let (pa, ta, ra) = d.spawn("recurse", &["recurse", "100", "1"]);
    let (pb, tb, _rb) = d.spawn("calls", &["calls", "100"]);
    let cr3a = m.cr3_of(pa);
    let t = Traced::new(
        Buffer::new(&d.mem, 128, 8),
        USER_TRACE | ctl::CR3FILTER | ctl::DISRETC,
        &[],
        cr3a,
    );
    let pts = m.pts().unwrap();
    d.on_cpu.lock().unwrap()[0] = Some(t.buf.clone());
    pts.restore_state(0, &t.state).unwrap();
    let mut turn = 0;
    while d.alive(pa) || d.alive(pb) {
        let (pid, tid) = [(pa, ta), (pb, tb)][turn % 2];
        turn += 1;
        if d.alive(pid) {
            m.switch_in(0, tid);
            m.tick(0);
            m.switch_out(0);
        }
    }
    let end = pts.save_state(0);
    t.buf.lock().unwrap().take(end[2]);
    let elf = programs::image(Arch::X86_64, "recurse").unwrap();
    // No asid: only recurse's code can be decoded at all.
    let items = decode(&t.trace(), &[ElfImage::new("recurse", &elf, 0, None)], None);
    assert!(lost(&items).is_empty(), "{:?}", lost(&items));
    assert_same("recurse", &insns(&items), &ra.lock().unwrap().pcs);
    // With DisRETC every return is a TIP: as many TIPs as returns.
    let trace = t.trace();
    let cfg = config(&trace);
    let mut pd = ipt::PacketDecoder::new(&cfg).unwrap();
    let (packets, err) = pd.dump();
    assert_eq!(err, None);
    let tips = packets.iter().filter(|p| p.name == "tip").count();
    let returns = items
        .iter()
        .filter(|i| matches!(i, ipt::Item::Insn(x) if x.iclass == ipt::iclass::RETURN))
        .count();
    assert!(returns > 100);
    assert_eq!(tips, returns, "no compressed return");
    d.check_clean(&[&t]);
}

#[test]
fn the_kernel_saves_and_restores_pt_state_with_xsaves_and_xrstors() {
    let m = machine(5_000);
    let _g = m.enter();
    let d = Driver::new(&m, 5_000);
    let (pid, tid, rec) = d.spawn("calls", &["calls", "50"]);
    let t = Traced::new(Buffer::new(&d.mem, 64, 8), USER_TRACE, &[], 0);
    let mut state = t.state;
    let runnable = |pid| {
        m.proc_info(pid)
            .is_some_and(|p| !p.zombie && p.threads.contains(&tid))
    };
    while runnable(pid) {
        m.switch_in(0, tid);
        // As pt.c does it, in the thread's context on its CPU, with
        // IA32_XSS.PT set around the instruction.
        m.in_thread(tid, || {
            ksim::kern::wrmsr(IA32_XSS, XSS_PT);
            ksim::kern::pt_xrstors(&state);
            ksim::kern::wrmsr(IA32_XSS, 0);
        });
        assert_ne!(
            m.in_thread(tid, || ksim::kern::rdmsr(msr::CTL)) & ctl::TRACEEN,
            0
        );
        m.tick(0);
        if m.running_on(0) != Some(tid) {
            // It exited: the kernel's exit path stops the trace.
            state = m.pts().unwrap().save_state(0);
            break;
        }
        state = m.in_thread(tid, || {
            ksim::kern::wrmsr(IA32_XSS, XSS_PT);
            let s = ksim::kern::pt_xsaves();
            ksim::kern::wrmsr(IA32_XSS, 0);
            s
        });
        assert_eq!(
            m.in_thread(tid, || ksim::kern::rdmsr(msr::CTL)) & ctl::TRACEEN,
            0
        );
        m.switch_out(0);
    }
    t.buf.lock().unwrap().take(state[2]);
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let items = decode(&t.trace(), &[ElfImage::new("calls", &elf, 0, None)], None);
    assert_same("calls", &insns(&items), &rec.lock().unwrap().pcs);
    d.check_clean(&[&t]);
}

#[test]
fn a_gp_of_xrstors_in_the_kernel_panics() {
    let m = machine(5_000);
    let _g = m.enter();
    let d = Driver::new(&m, 5_000);
    let (_, tid, _) = d.spawn("calls", &["calls", "50"]);
    let t = Traced::new(Buffer::new(&d.mem, 1, 0), USER_TRACE, &[], 0);
    m.switch_in(0, tid);
    m.wrmsr(0, IA32_XSS, XSS_PT).unwrap();
    assert!(
        m.wrmsr(0, IA32_XSS, 1).is_err(),
        "x87 is no supervisor state"
    );
    m.in_thread(tid, || ksim::kern::pt_xrstors(&t.state));
    // Again, with TraceEn set: #GP.
    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ksim::kern::pt_xrstors(&t.state)
    }));
    assert!(again.is_err(), "#GP");
    let reserved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.wrmsr(0, msr::CTL, 1 << 6)
    }));
    assert!(
        matches!(reserved, Ok(Err(_))),
        "FabricEn is reserved: {reserved:?}"
    );
}

#[test]
fn a_tracestop_range_stops_the_trace_where_it_is_entered() {
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let (start, size) = symbol(&elf, "f_mix");
    let range = (start, start + size - 1);
    let m = machine(5_000);
    let _g = m.enter();
    let d = Driver::new(&m, 5_000);
    let (pid, tid, rec) = d.spawn("calls", &["calls", "100"]);
    let addr0_cfg_2 = 2 << 32;
    let mut t = Traced::new(
        Buffer::new(&d.mem, 64, 8),
        USER_TRACE | addr0_cfg_2,
        &[range],
        0,
    );
    d.run(pid, tid, &mut t, 3);
    assert_ne!(t.state[3] & (1 << 5), 0, "IA32_RTIT_STATUS.Stopped");
    let items = decode(
        &t.trace(),
        &[ElfImage::new("calls", &elf, 0, None)],
        Some((2, &[range])),
    );
    assert!(lost(&items).is_empty(), "{:?}", lost(&items));
    assert!(
        items
            .iter()
            .any(|i| matches!(i, ipt::Item::Event(ipt::Event::Stop))),
        "a stop event"
    );
    let executed = rec.lock().unwrap().pcs.clone();
    let entry = executed
        .iter()
        .position(|pc| (range.0..=range.1).contains(pc))
        .expect("f_mix ran");
    assert_same("up to f_mix", &insns(&items), &executed[..entry]);
    d.check_clean(&[&t]);
}

#[test]
fn a_thread_that_migrates_between_cpus_decodes_from_one_buffer() {
    let m = machine(3_000);
    let _g = m.enter();
    let d = Driver::new(&m, 3_000);
    let (pid, tid, rec) = d.spawn("recurse", &["recurse", "150", "2"]);
    let mut t = Traced::new(Buffer::new(&d.mem, 64, 8), USER_TRACE, &[], 0);
    let mut cpu = 0;
    let runnable = |pid| {
        m.proc_info(pid)
            .is_some_and(|p| !p.zombie && p.threads.contains(&tid))
    };
    let mut moves = 0;
    while runnable(pid) {
        d.switch_in(cpu, tid, &t);
        m.tick(cpu);
        t.state = m.pts().unwrap().save_state(cpu);
        t.buf.lock().unwrap().take(t.state[2]);
        d.on_cpu.lock().unwrap()[cpu as usize] = None;
        m.switch_out(cpu);
        cpu ^= 1;
        moves += 1;
    }
    assert!(moves > 10, "{moves} moves");
    let elf = programs::image(Arch::X86_64, "recurse").unwrap();
    let items = decode(&t.trace(), &[ElfImage::new("recurse", &elf, 0, None)], None);
    assert!(lost(&items).is_empty(), "{:?}", lost(&items));
    assert_same("recurse", &insns(&items), &rec.lock().unwrap().pcs);
    d.check_clean(&[&t]);
}

/// The cost of tracing: `cargo test --release -p ksim --test pt_oracle
/// -- --ignored --nocapture speed` prints instructions per second of a
/// program run untraced, and traced in thread mode into a ToPA ring.
#[test]
#[ignore]
fn speed() {
    let mut insns = 0;
    for traced in [true, false] {
        let m = machine(10_000);
        let _g = m.enter();
        let d = Driver::new(&m, 10_000);
        let image = programs::image(Arch::X86_64, "sort").unwrap();
        let (pid, tid) = m.spawn(Cred::root(), "sort");
        m.exec_program(pid, "/usr/bin/sort", &image, &["sort", "64"])
            .unwrap();
        let mut t = Traced::new(Buffer::new(&d.mem, 256, 32), USER_TRACE, &[], 0);
        let began = std::time::Instant::now();
        if traced {
            d.run(pid, tid, &mut t, 10);
            insns = m.pts().unwrap().stats(0).insns;
        } else {
            m.switch_in(0, tid);
            while d.alive(pid) {
                m.tick(0);
            }
        }
        let secs = began.elapsed().as_secs_f64();
        eprintln!(
            "traced {traced}: {insns} instructions in {secs:.3} s, {:.1} M/s, {} bytes of trace",
            insns as f64 / secs / 1e6,
            t.trace().len()
        );
    }
}

#[test]
fn images_from_a_section_cache_or_a_read_callback_decode_alike() {
    let m = machine(5_000);
    let _g = m.enter();
    let d = Driver::new(&m, 5_000);
    let (pid, tid, rec) = d.spawn("calls", &["calls", "50"]);
    let mut t = Traced::new(Buffer::new(&d.mem, 64, 8), USER_TRACE, &[], 0);
    d.run(pid, tid, &mut t, 3);
    let trace = t.trace();
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let executed = rec.lock().unwrap().pcs.clone();
    let cfg = config(&trace);
    // A section cache, as hwt(8) shares files between processes.
    let cache = ipt::SectionCache::new("objects");
    let path = temp_file("calls", &elf);
    let mut image = ipt::Image::new("cached");
    for (off, size, vaddr) in text_segments(&elf) {
        let isid = cache.add_file(&path, off, size, vaddr).unwrap();
        image.add_cached(&cache, isid, None).unwrap();
    }
    drop(cache);
    let mut dec = ipt::InsnDecoder::new(&cfg, &mut image).unwrap();
    assert_same("cached", &insns(&dec.decode_all()), &executed);
    drop(dec);
    drop(image);
    let _ = std::fs::remove_file(&path);
    // A callback that reads the ELF's segments.
    let segments = text_segments(&elf);
    let bytes = elf.clone();
    let mut image = ipt::Image::new("callback");
    image.set_callback(Box::new(move |addr, buf| {
        for &(off, size, vaddr) in &segments {
            if (vaddr..vaddr + size).contains(&addr) {
                let from = (off + addr - vaddr) as usize;
                let n = buf.len().min((vaddr + size - addr) as usize);
                buf[..n].copy_from_slice(&bytes[from..from + n]);
                return n;
            }
        }
        0
    }));
    let mut dec = ipt::InsnDecoder::new(&cfg, &mut image).unwrap();
    assert_same("callback", &insns(&dec.decode_all()), &executed);
    // The dump: PSB+ with a TSC that only goes up.
    let (packets, err) = ipt::PacketDecoder::new(&cfg).unwrap().dump();
    assert_eq!(err, None);
    let tscs: Vec<u64> = packets
        .iter()
        .filter(|p| p.name == "tsc")
        .map(|p| p.payload)
        .collect();
    assert!(
        tscs.len() > 3 && tscs.windows(2).all(|w| w[0] < w[1]),
        "{tscs:?}"
    );
    assert_eq!(packets[0].name, "psb");
    d.check_clean(&[&t]);
}

#[test]
fn psbs_come_every_psbfreq_bytes() {
    for freq in [0u64, 2] {
        let m = machine(5_000);
        let _g = m.enter();
        let d = Driver::new(&m, 5_000);
        let (pid, tid, rec) = d.spawn("calls", &["calls", "300"]);
        let mut t = Traced::new(
            Buffer::new(&d.mem, 64, 8),
            USER_TRACE | freq << ctl::PSBFREQ_SHIFT,
            &[],
            0,
        );
        // Long slices: each switch-in starts a PSB+ of its own.
        d.run(pid, tid, &mut t, 50);
        let trace = t.trace();
        let cfg = config(&trace);
        let (packets, err) = ipt::PacketDecoder::new(&cfg).unwrap().dump();
        assert_eq!(err, None);
        let psbs: Vec<u64> = packets
            .iter()
            .filter(|p| p.name == "psb")
            .map(|p| p.offset)
            .collect();
        let period = 2048 << freq;
        // At the first instruction boundary past the period; the first
        // comes at each enable (switch-in), so only full periods count.
        let full: Vec<u64> = psbs
            .windows(2)
            .map(|w| w[1] - w[0])
            .filter(|&d| d >= period)
            .collect();
        assert!(full.len() > 2, "PSBFreq {freq}: {psbs:?}");
        assert!(
            full.iter().all(|&d| d < period + 64),
            "PSBFreq {freq}: {full:?}"
        );
        let items = decode(
            &trace,
            &[ElfImage::new(
                "calls",
                &programs::image(Arch::X86_64, "calls").unwrap(),
                0,
                None,
            )],
            None,
        );
        assert_same("calls", &insns(&items), &rec.lock().unwrap().pcs);
        d.check_clean(&[&t]);
    }
}

//! pt(4) through hwt(4), judged by Intel's decoder: a process is traced in
//! thread or CPU mode through /dev/hwt and its context's device (ALLOC,
//! SET_CONFIG with `struct pt_cpu_config`, START), the driver programs
//! the simulated Intel PT unit (XRSTORS/XSAVES at context switches, ToPA
//! tables, the ToPA PMI), and libipt decodes the mapped buffer into
//! exactly the instructions the program executed.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hwt_ring::{Record, parse_record};
use ksim::cpu::Arch;
use ksim::programs;
use ksim::user_process::{UserProcess, UserThread};
use ksim::{CpuState, Cred, DevFd, Machine, MachineConfig};
use uapi::hwt::*;
use uapi::pt::*;

/// Skylake client: family 6, model 0x5E, stepping 3.
const CPU_KEY: &str = "GenuineIntel-6-5E-3";
const PAGE: usize = 4096;

/// The user instructions a thread retired.
type Recorder = ksim::cpu::events::UserPcs;

/// A machine with hwt and pt loaded.
struct Sim {
    m: Machine,
    hwt: Option<hwt::Module>,
    pt: Option<intel_pt::Module>,
    per_tick: u64,
    _e: ksim::machine_guard::Entered,
}

impl Sim {
    fn new(per_tick: u64) -> Sim {
        let m = Machine::new(MachineConfig {
            cpus: vec![CpuState::Online; 2],
            insns_per_tick: per_tick,
            cpuid: CPU_KEY.into(),
            ..MachineConfig::default()
        });
        let e = m.enter();
        let (_, kld) = m.spawn(Cred::root(), "kldload");
        let (hwt, pt) = m.in_thread(kld, || {
            let hwt = hwt::Module::load().expect("hwt loads");
            let pt = intel_pt::Module::load(&hwt).expect("pt loads on Skylake");
            (hwt, pt)
        });
        Sim {
            m,
            hwt: Some(hwt),
            pt: Some(pt),
            per_tick,
            _e: e,
        }
    }

    fn ioctl(&self, tid: u32, pid: u32, fd: &DevFd, cmd: u32, arg: &mut [u8]) -> Result<(), i32> {
        let a = self.m.user_alloc(pid, arg.len());
        self.m.user_write(pid, a, arg);
        let r = self.m.dev_ioctl(tid, fd, cmd, a);
        arg.copy_from_slice(&self.m.user_read(pid, a, arg.len()));
        r
    }

    fn unload(mut self) {
        let (_, kld) = self.m.spawn(Cred::root(), "kldunload");
        let (pt, hwt) = (self.pt.take(), self.hwt.take());
        self.m.in_thread(kld, || {
            drop(pt);
            drop(hwt);
        });
        assert_eq!(self.m.physmem().live_objects(), 0, "buffers left");
        assert_eq!(
            self.m.physmem().stray_writes(),
            0,
            "{:?}",
            self.m.physmem().stray_log()
        );
        assert_eq!(self.m.violations(), vec![], "witness");
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        // A test that failed still unloads in a thread of the machine.
        if self.pt.is_some() || self.hwt.is_some() {
            let (_, kld) = self.m.spawn(Cred::root(), "kldunload");
            let (pt, hwt) = (self.pt.take(), self.hwt.take());
            self.m.in_thread(kld, || {
                drop(pt);
                drop(hwt);
            });
        }
    }
}

/// A tracing tool's session: the owner process and its context.
struct Session {
    owner: (u32, u32),
    ident: i32,
    dev: DevFd,
}

/// `struct pt_cpu_config` as bytes.
fn pt_config(rtit_ctl: u64, ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut b = vec![0u8; 72];
    b[0..8].copy_from_slice(&rtit_ctl.to_ne_bytes());
    b[16..20].copy_from_slice(&(ranges.len() as i32).to_ne_bytes());
    for (i, &(s, e)) in ranges.iter().enumerate() {
        b[24 + 16 * i..32 + 16 * i].copy_from_slice(&s.to_ne_bytes());
        b[32 + 16 * i..40 + 16 * i].copy_from_slice(&e.to_ne_bytes());
    }
    b
}

impl Sim {
    /// ALLOC (`mode`, `pid` or `cpus`), SET_CONFIG, START.
    fn session(&self, mode: i32, pid: u32, cpus: &[u32], pages: usize, config: &[u8]) -> Session {
        let s = self.configured(mode, pid, cpus, pages, config);
        self.start(&s).expect("START");
        s
    }

    /// A thread-mode session of `pid` tracing its user-mode branches into
    /// 64 pages.
    fn thread_session(&self, pid: u32) -> Session {
        self.session(
            HWT_MODE_THREAD,
            pid,
            &[],
            64,
            &pt_config(USER_BRANCHES, &[]),
        )
    }

    /// START.
    fn start(&self, s: &Session) -> Result<(), i32> {
        let (opid, otid) = s.owner;
        let mut a = vec![0u8; 16];
        self.ioctl(otid, opid, &s.dev, HWT_IOC_START, &mut a)
    }

    /// ALLOC and SET_CONFIG.
    fn configured(
        &self,
        mode: i32,
        pid: u32,
        cpus: &[u32],
        pages: usize,
        config: &[u8],
    ) -> Session {
        let (opid, otid) = self.m.spawn(Cred::root(), "hwt");
        let fd = self.m.dev_open(otid, "/dev/hwt", true, true).unwrap();
        let name = self.m.user_alloc(opid, 3);
        self.m.user_write(opid, name, b"pt\0");
        let ident = self.m.user_alloc(opid, 4);
        let set = self.m.user_alloc(opid, 128);
        let mut map = vec![0u8; 128];
        for &c in cpus {
            map[c as usize / 8] |= 1 << (c % 8);
        }
        self.m.user_write(opid, set, &map);
        let mut a = vec![0u8; 64];
        a[0..8].copy_from_slice(&((pages * PAGE) as u64).to_ne_bytes());
        a[8..12].copy_from_slice(&mode.to_ne_bytes());
        a[12..16].copy_from_slice(&(pid as i32).to_ne_bytes());
        a[16..24].copy_from_slice(&set.to_ne_bytes());
        a[24..32].copy_from_slice(&128u64.to_ne_bytes());
        a[32..40].copy_from_slice(&name.to_ne_bytes());
        a[40..48].copy_from_slice(&ident.to_ne_bytes());
        self.ioctl(otid, opid, &fd, HWT_IOC_ALLOC, &mut a)
            .expect("ALLOC");
        let ident = i32::from_ne_bytes(self.m.user_read(opid, ident, 4).try_into().unwrap());
        let path = if mode == HWT_MODE_THREAD {
            format!("/dev/hwt_{ident}_{pid}")
        } else {
            format!("/dev/hwt_{ident}_{}", cpus[0])
        };
        let dev = self.m.dev_open(otid, &path, true, true).unwrap();
        let cfg = self.m.user_alloc(opid, config.len());
        self.m.user_write(opid, cfg, config);
        let mut c = vec![0u8; 32];
        c[8..16].copy_from_slice(&cfg.to_ne_bytes());
        c[16..24].copy_from_slice(&(config.len() as u64).to_ne_bytes());
        c[24..28].copy_from_slice(&1i32.to_ne_bytes());
        self.ioctl(otid, opid, &dev, HWT_IOC_SET_CONFIG, &mut c)
            .expect("SET_CONFIG");
        Session {
            owner: (opid, otid),
            ident,
            dev,
        }
    }

    /// BUFPTR_GET: the bytes written into the buffer so far (page and
    /// offset).
    fn bufptr(&self, s: &Session, dev: &DevFd) -> u64 {
        let (opid, otid) = s.owner;
        let page = self.m.user_alloc(opid, 4);
        let off = self.m.user_alloc(opid, 8);
        let mut a = vec![0u8; 32];
        a[0..8].copy_from_slice(&page.to_ne_bytes());
        a[8..16].copy_from_slice(&off.to_ne_bytes());
        self.ioctl(otid, opid, dev, HWT_IOC_BUFPTR_GET, &mut a)
            .expect("BUFPTR_GET");
        let page = i32::from_ne_bytes(self.m.user_read(opid, page, 4).try_into().unwrap());
        let off = u64::from_ne_bytes(self.m.user_read(opid, off, 8).try_into().unwrap());
        page as u64 * PAGE as u64 + off
    }

    /// The records of the session so far, read as hwt(8) reads them.
    fn records(&self, s: &Session) -> Vec<Record> {
        let (opid, otid) = s.owner;
        let buf = self.m.user_alloc(opid, 1056 * 256);
        let n = self.m.user_alloc(opid, 4);
        let mut out = Vec::new();
        loop {
            self.m.user_write(opid, n, &256i32.to_ne_bytes());
            let mut a = vec![0u8; 32];
            a[0..8].copy_from_slice(&buf.to_ne_bytes());
            a[8..16].copy_from_slice(&n.to_ne_bytes());
            self.ioctl(otid, opid, &s.dev, HWT_IOC_RECORD_GET, &mut a)
                .expect("RECORD_GET");
            let got = i32::from_ne_bytes(self.m.user_read(opid, n, 4).try_into().unwrap());
            if got == 0 {
                return out;
            }
            let bytes = self.m.user_read(opid, buf, 1056 * got as usize);
            out.extend(
                bytes
                    .chunks(1056)
                    .map(|r| parse_record(r).expect("a whole entry")),
            );
        }
    }

    /// Puts `name` into process `pid` with its main thread's instructions
    /// recorded.
    fn exec(&self, pid: u32, name: &str, argv: &[&str]) -> Arc<Mutex<Recorder>> {
        let image = programs::image(Arch::X86_64, name).expect("the ksim build made the programs");
        let path = format!("/usr/bin/{name}");
        let mut process = UserProcess::exec(&image, &path, argv, &[], pid as i32, 0).expect("exec");
        let rec = Arc::new(Mutex::new(Recorder::default()));
        process
            .cpu()
            .subscribe(Box::new(rec.clone()))
            .expect("subscribe");
        self.m
            .exec_user_thread(pid, &path, &image, UserThread::new(process, self.per_tick));
        rec
    }

    fn alive(&self, pid: u32) -> bool {
        self.m.proc_info(pid).is_some_and(|p| !p.zombie)
    }

    /// Runs `pid`'s threads on `cpu`, `slice` ticks at a time, until it
    /// exits; the scheduler's hooks switch tracing with the threads.
    fn run(&self, pid: u32, cpu: u32, slice: u32) {
        self.run_all(&[pid], cpu, slice, |_| {});
    }

    /// Runs the threads of `pids` in turn on `cpu`, `slice` ticks at a
    /// time, until all exit; `between` runs after each slice, with the
    /// number of slices so far.
    fn run_all(&self, pids: &[u32], cpu: u32, slice: u32, mut between: impl FnMut(usize)) {
        for turn in 0..100_000 {
            let live: Vec<u32> = pids
                .iter()
                .flat_map(|&p| {
                    if self.alive(p) {
                        self.m.proc_info(p).unwrap().threads
                    } else {
                        Vec::new()
                    }
                })
                .collect();
            if live.is_empty() {
                return;
            }
            let next = live[turn % live.len()];
            self.m.switch_in(cpu, next);
            for _ in 0..slice {
                self.m.tick(cpu);
                // The thread is gone from the CPU once it exits.
                if self.m.running_on(cpu) != Some(next) {
                    break;
                }
            }
            if self.m.running_on(cpu) == Some(next) {
                self.m.switch_out(cpu);
            }
            between(turn);
        }
        panic!("{pids:?} did not exit");
    }

    /// The buffer of `dev`, mapped read-only as hwt(8) maps it.
    fn buffer(&self, s: &Session, dev: &DevFd, len: usize) -> Vec<u8> {
        let map = self
            .m
            .dev_mmap(s.owner.1, dev, 0, len as u64, 1)
            .expect("mmap");
        let mut b = vec![0u8; len];
        map.read(0, &mut b);
        b
    }
}

/// Writes `bytes` to a file of its own, for libipt's image: libipt maps
/// the files, and a test rewriting the file another test has mapped (the
/// same program's) would fault that one with SIGBUS.
fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!("pt-hwt-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!(
        "{name}.{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&p, bytes).unwrap();
    p
}

/// libipt's instruction flow over `trace` with the program's code.
fn decode(trace: &[u8], name: &str, filter: Option<(u64, &[(u64, u64)])>) -> Vec<ipt::Item> {
    decode_with(trace, &[(name, 0)], filter)
}

/// libipt's instruction flow with several objects, each at a load bias.
fn decode_with(
    trace: &[u8],
    objects: &[(&str, u64)],
    filter: Option<(u64, &[(u64, u64)])>,
) -> Vec<ipt::Item> {
    let mut cfg = ipt::Config::new(trace)
        .cpu(6, 0x5E, 3)
        .expect("libipt knows Skylake");
    if let Some((bits, ranges)) = filter {
        cfg = cfg.addr_filter(bits, ranges);
    }
    let mut image = ipt::Image::new("hwt");
    for &(name, bias) in objects {
        let elf = programs::image(Arch::X86_64, name).unwrap();
        let path = temp_file(name, &elf);
        for (off, size, vaddr) in ksim::elf::exec_segments(&elf) {
            image
                .add_file(&path, off, size, bias + vaddr)
                .expect("pt_image_add_file");
        }
    }
    let mut dec = ipt::InsnDecoder::new(&cfg, &mut image).expect("decoder");
    dec.decode_all()
}

fn lost(items: &[ipt::Item]) -> usize {
    items
        .iter()
        .filter(|i| matches!(i, ipt::Item::Lost { .. }))
        .count()
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

fn assert_same(what: &str, decoded: &[u64], executed: &[u64]) {
    if decoded == executed {
        return;
    }
    let at = decoded
        .iter()
        .zip(executed)
        .position(|(a, b)| a != b)
        .unwrap_or(decoded.len().min(executed.len()));
    let from = at.saturating_sub(4);
    panic!(
        "{what}: decoded {} instructions, executed {}; first difference at {at}:\n decoded  {:x?}\n executed {:x?}",
        decoded.len(),
        executed.len(),
        &decoded[from..(at + 4).min(decoded.len())],
        &executed[from..(at + 4).min(executed.len())],
    );
}

const USER_BRANCHES: u64 = RTIT_CTL_USER | RTIT_CTL_BRANCHEN;

#[test]
fn thread_mode_traces_each_program_exactly() {
    let cases: &[(&str, &[&str])] = &[
        ("calls", &["calls", "300"]),
        ("sort", &["sort", "1"]),
        ("recurse", &["recurse", "200", "2"]),
        ("syscalls", &["syscalls", "40"]),
    ];
    for &(name, argv) in cases {
        let sim = Sim::new(5_000);
        let (pid, _) = sim.m.spawn(Cred::root(), name);
        let s = sim.thread_session(pid);
        let rec = sim.exec(pid, name, argv);
        sim.run(pid, 0, 3);
        let len = sim.bufptr(&s, &s.dev) as usize;
        assert!(len > 0 && len < 64 * PAGE, "{name}: {len} bytes, no wrap");
        let trace = sim.buffer(&s, &s.dev, len);
        let items = decode(&trace, name, None);
        let executed = rec.lock().unwrap().pcs.clone();
        assert!(executed.len() > 1000, "{name} ran {}", executed.len());
        assert_same(name, &insns(&items), &executed);
        // The records: THREAD_CREATE 0, EXECUTABLE, and a BUFFER record
        // for each page the unit filled (a PMI each).
        let recs = sim.records(&s);
        assert_eq!(recs[0], Record::ThreadCreate { thread_id: 0 });
        assert!(
            matches!(&recs[1], Record::Object { executable: true, path, .. } if path.ends_with(name)),
            "{recs:?}"
        );
        let buffers: Vec<(i32, u64)> = recs
            .iter()
            .filter_map(|r| match *r {
                Record::Buffer { buf_id, position } => Some((buf_id, position)),
                _ => None,
            })
            .collect();
        assert_eq!(buffers.len(), len / PAGE, "{name}: {recs:?}");
        // Each comes from the PMI of a filled page: the unit is on the
        // next page then (some bytes in: the interrupt comes after the
        // instruction that filled it, and the handler runs later).
        for (k, &(id, position)) in buffers.iter().enumerate() {
            assert_eq!(id, 0);
            assert_eq!(position as usize / PAGE, k + 1, "{name}: page {k} filled");
        }
        sim.unload();
    }
}

/// A thread the traced process creates (thr_new) gets a buffer, a device,
/// a THREAD_CREATE record and a trace of its own, as those that were
/// there at ALLOC do: each worker of `threads` decodes from its entry,
/// `worker`, with exactly the calls of `mix` its rounds make.
#[test]
fn a_thread_created_while_traced_is_traced_in_its_own_buffer() {
    let (workers, rounds) = (2, 5);
    let elf = programs::image(Arch::X86_64, "threads").unwrap();
    let symbols = ksim::elf::parse_symbols(&elf).unwrap();
    let address = |name: &str| {
        symbols
            .iter()
            .find(|(n, _, _)| n == name)
            .unwrap_or_else(|| panic!("threads has {name}()"))
            .1
    };
    let sim = Sim::new(5_000);
    let (pid, _) = sim.m.spawn(Cred::root(), "threads");
    let s = sim.thread_session(pid);
    let argv = [
        "threads".to_string(),
        workers.to_string(),
        rounds.to_string(),
    ];
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    sim.exec(pid, "threads", &argv);
    sim.run(pid, 0, 3);
    let created: Vec<i32> = sim
        .records(&s)
        .iter()
        .filter_map(|r| match *r {
            Record::ThreadCreate { thread_id } => Some(thread_id),
            _ => None,
        })
        .collect();
    assert_eq!(created, (0..=workers).collect::<Vec<i32>>());
    for thread_id in 1..=workers {
        let path = format!("/dev/hwt_{}_{pid}_{thread_id}", s.ident);
        let dev = sim.m.dev_open(s.owner.1, &path, true, true).unwrap();
        let len = sim.bufptr(&s, &dev) as usize;
        assert!(
            len > 0 && len < 64 * PAGE,
            "thread {thread_id}: {len} bytes"
        );
        let items = decode(&sim.buffer(&s, &dev, len), "threads", None);
        assert_eq!(lost(&items), 0, "thread {thread_id}");
        let ips = insns(&items);
        assert_eq!(ips.first(), Some(&address("worker")), "thread {thread_id}");
        let mix = address("mix");
        assert_eq!(
            ips.iter().filter(|&&ip| ip == mix).count(),
            rounds as usize * 1000,
            "thread {thread_id}: one entry into mix() per inner round"
        );
    }
    sim.unload();
}

#[test]
fn another_process_on_the_cpu_is_not_in_the_trace() {
    let sim = Sim::new(2_000);
    let (traced, _) = sim.m.spawn(Cred::root(), "calls");
    let (other, _) = sim.m.spawn(Cred::root(), "recurse");
    let s = sim.thread_session(traced);
    let rec = sim.exec(traced, "calls", &["calls", "400"]);
    let other_rec = sim.exec(other, "recurse", &["recurse", "100", "2"]);
    sim.run_all(&[traced, other], 0, 2, |_| {});
    let len = sim.bufptr(&s, &s.dev) as usize;
    let items = decode(&sim.buffer(&s, &s.dev, len), "calls", None);
    let executed = rec.lock().unwrap().pcs.clone();
    assert!(other_rec.lock().unwrap().pcs.len() > 1000, "the other ran");
    assert_eq!(lost(&items), 0);
    assert_same("calls beside recurse", &insns(&items), &executed);
    sim.unload();
}

#[test]
fn an_object_mapped_at_run_time_decodes_from_its_mmap_record() {
    let sim = Sim::new(2_000);
    let object = programs::image(Arch::X86_64, programs::SECOND_OBJECT).unwrap();
    sim.m.install(programs::SECOND_OBJECT_PATH, object.clone());
    let (pid, _) = sim.m.spawn(Cred::root(), "mapobj");
    let s = sim.thread_session(pid);
    let rec = sim.exec(pid, "mapobj", &["mapobj", "300"]);
    sim.run(pid, 0, 3);
    assert_eq!(sim.m.program_output(pid, 1), b"mapobj: ok\n");
    // The MMAP record of the object's text names where it went; its
    // MUNMAP names the same address.
    let recs = sim.records(&s);
    let mapped = recs
        .iter()
        .find_map(|r| match r {
            Record::Object {
                executable: false,
                path,
                addr,
                ..
            } if path == programs::SECOND_OBJECT_PATH => Some(*addr),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no MMAP record: {recs:?}"));
    let (_, _, text_vaddr) = ksim::elf::exec_segments(&object)[0];
    let bias = mapped - (text_vaddr & !0xfff);
    assert!(
        recs.iter()
            .any(|r| matches!(*r, Record::Munmap { addr } if addr != 0 && addr <= mapped)),
        "{recs:?}"
    );
    let len = sim.bufptr(&s, &s.dev) as usize;
    let trace = sim.buffer(&s, &s.dev, len);
    let items = decode_with(
        &trace,
        &[("mapobj", 0), (programs::SECOND_OBJECT, bias)],
        None,
    );
    let executed = rec.lock().unwrap().pcs.clone();
    assert!(
        executed
            .iter()
            .any(|&pc| pc >= mapped && pc < mapped + 0x10000),
        "the object's code ran"
    );
    assert_eq!(lost(&items), 0);
    assert_same("mapobj", &insns(&items), &executed);
    sim.unload();
}

#[test]
fn an_ip_filter_traces_one_function_only() {
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let symbols = ksim::elf::parse_symbols(&elf).unwrap();
    let &(_, start, size) = symbols
        .iter()
        .find(|(n, _, _)| n == "run")
        .expect("calls has run()");
    let range = (start, start + size - 1);
    let sim = Sim::new(2_000);
    let (pid, _) = sim.m.spawn(Cred::root(), "calls");
    let s = sim.session(
        HWT_MODE_THREAD,
        pid,
        &[],
        64,
        &pt_config(USER_BRANCHES, &[range]),
    );
    let rec = sim.exec(pid, "calls", &["calls", "300"]);
    sim.run(pid, 0, 3);
    let len = sim.bufptr(&s, &s.dev) as usize;
    let items = decode(&sim.buffer(&s, &s.dev, len), "calls", Some((1, &[range])));
    let executed: Vec<u64> = rec
        .lock()
        .unwrap()
        .pcs
        .iter()
        .copied()
        .filter(|&pc| pc >= range.0 && pc <= range.1)
        .collect();
    let all = rec.lock().unwrap().pcs.len();
    assert!(
        executed.len() > 100 && executed.len() < all,
        "{} of {all}",
        executed.len()
    );
    assert_eq!(lost(&items), 0);
    assert_same("run() only", &insns(&items), &executed);
    sim.unload();
}

#[test]
fn a_wrapped_buffer_keeps_the_latest_trace_from_its_first_psb() {
    let sim = Sim::new(2_000);
    let (pid, _) = sim.m.spawn(Cred::root(), "calls");
    let s = sim.session(HWT_MODE_THREAD, pid, &[], 2, &pt_config(USER_BRANCHES, &[]));
    let rec = sim.exec(pid, "calls", &["calls", "20000"]);
    sim.run(pid, 0, 3);
    // The BUFFER records count the pages the unit filled; they go round
    // the two pages.
    let pages: Vec<u64> = sim
        .records(&s)
        .iter()
        .filter_map(|r| match *r {
            Record::Buffer { position, .. } => Some(position / PAGE as u64),
            _ => None,
        })
        .collect();
    assert!(pages.len() > 4, "{pages:?}");
    assert!(pages.iter().all(|&p| p == 0 || p == 1), "{pages:?}");
    // The ring, oldest byte first, as hwt(8) reads a wrapped buffer.
    let at = sim.bufptr(&s, &s.dev) as usize;
    let ring = sim.buffer(&s, &s.dev, 2 * PAGE);
    let trace: Vec<u8> = ring[at..].iter().chain(&ring[..at]).copied().collect();
    let items = decode(&trace, "calls", None);
    let decoded = insns(&items);
    let executed = rec.lock().unwrap().pcs.clone();
    // What is left is the end of the run: decoding from the first PSB
    // gives exactly the last instructions executed.
    assert!(decoded.len() > 100, "{} decoded", decoded.len());
    assert!(decoded.len() < executed.len() / 2);
    assert_same(
        "the tail of calls",
        &decoded,
        &executed[executed.len() - decoded.len()..],
    );
    sim.unload();
}

#[test]
fn cpu_mode_traces_what_runs_on_the_cpu() {
    let sim = Sim::new(2_000);
    let s = sim.session(HWT_MODE_CPU, 0, &[1], 64, &pt_config(USER_BRANCHES, &[]));
    let kernel = sim.records(&s);
    assert!(
        !kernel.is_empty() && kernel.iter().all(|r| matches!(r, Record::Kernel { .. })),
        "{kernel:?}"
    );
    let (pid, _) = sim.m.spawn(Cred::root(), "recurse");
    let rec = sim.exec(pid, "recurse", &["recurse", "150", "2"]);
    sim.run(pid, 1, 3);
    // One CPU-mode context traces at a time (FreeBSD: -1, here EBUSY).
    let second = sim.configured(HWT_MODE_CPU, 0, &[0], 4, &pt_config(USER_BRANCHES, &[]));
    assert_eq!(sim.start(&second), Err(16));
    let (opid, otid) = s.owner;
    let mut stop = vec![0u8; 16];
    sim.ioctl(otid, opid, &s.dev, HWT_IOC_STOP, &mut stop)
        .expect("STOP");
    let len = sim.bufptr(&s, &s.dev) as usize;
    let items = decode(&sim.buffer(&s, &s.dev, len), "recurse", None);
    assert_eq!(lost(&items), 0);
    assert_same("recurse on CPU 1", &insns(&items), &rec.lock().unwrap().pcs);
    // Once it stopped, the other may start.
    assert_eq!(sim.start(&second), Ok(()));
    sim.unload();
}

#[test]
fn stop_ends_the_trace_of_a_running_thread() {
    let sim = Sim::new(1_000);
    let (pid, tid) = sim.m.spawn(Cred::root(), "sort");
    let s = sim.thread_session(pid);
    let rec = sim.exec(pid, "sort", &["sort", "1"]);
    sim.m.switch_in(0, tid);
    for _ in 0..5 {
        sim.m.tick(0);
    }
    let (opid, otid) = s.owner;
    let mut stop = vec![0u8; 16];
    sim.ioctl(otid, opid, &s.dev, HWT_IOC_STOP, &mut stop)
        .expect("STOP");
    let at_stop = rec.lock().unwrap().pcs.len();
    for _ in 0..5 {
        sim.m.tick(0);
    }
    sim.m.switch_out(0);
    assert!(rec.lock().unwrap().pcs.len() > at_stop, "it ran on");
    let len = sim.bufptr(&s, &s.dev) as usize;
    let items = decode(&sim.buffer(&s, &s.dev, len), "sort", None);
    assert_same(
        "up to STOP",
        &insns(&items),
        &rec.lock().unwrap().pcs[..at_stop],
    );
    sim.unload();
}

#[test]
fn the_owner_exiting_while_its_thread_is_traced_stops_the_unit() {
    let sim = Sim::new(1_000);
    let (pid, tid) = sim.m.spawn(Cred::root(), "sort");
    let s = sim.session(HWT_MODE_THREAD, pid, &[], 4, &pt_config(USER_BRANCHES, &[]));
    let _rec = sim.exec(pid, "sort", &["sort", "1"]);
    sim.m.switch_in(0, tid);
    for _ in 0..3 {
        sim.m.tick(0);
    }
    // The owner goes while the traced thread runs on CPU 0: its context
    // and buffers are freed, and the unit must not write to them after.
    sim.m.exit(s.owner.0);
    for _ in 0..20 {
        sim.m.tick(0);
    }
    sim.m.switch_out(0);
    assert!(sim.alive(pid), "sort still runs");
    sim.unload();
}

#[test]
fn a_cpu_mode_context_that_never_ran_leaves_the_running_one_alone() {
    let sim = Sim::new(2_000);
    let running = sim.session(HWT_MODE_CPU, 0, &[0], 4, &pt_config(USER_BRANCHES, &[]));
    // Another owner's CPU-mode context, never started, goes with its
    // owner: the running one stays the only one.
    let idle = sim.configured(HWT_MODE_CPU, 0, &[1], 4, &pt_config(USER_BRANCHES, &[]));
    sim.m.exit(idle.owner.0);
    let third = sim.configured(HWT_MODE_CPU, 0, &[1], 4, &pt_config(USER_BRANCHES, &[]));
    assert_eq!(sim.start(&third), Err(16), "EBUSY while the first runs");
    sim.m.exit(running.owner.0);
    assert_eq!(sim.start(&third), Ok(()));
    sim.unload();
}

//! hwt(8) on the simulated machine: it traces a real program through
//! /dev/hwt and pt(4), and its decoded output is judged against the
//! instructions the same program executes on a machine of the test's own
//! (the programs are deterministic) and against the program's symbol
//! table.

// Host test code.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ksim::cpu::Arch;
use ksim::programs;
use ksim::user_process::{UserProcess, UserThread};
use ksim::{CpuState, Cred, Machine, MachineConfig};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hwt-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// hwt(8) with `args` on a private simulated machine whose files go to
/// `files`.
fn hwt_command(files: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hwt"));
    c.args(args)
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_FILES", files)
        .env_remove("LIBPMC_SIM_SOCKET");
    c
}

/// Runs hwt(8) with `args` on a private simulated machine whose files go
/// to `files`.
fn hwt(files: &Path, args: &[&str]) -> Output {
    hwt_command(files, args).output().expect("hwt runs")
}

type Recorder = ksim::cpu::events::UserPcs;

/// The user instructions `name` executes with `argv`, on a machine of
/// the test's own.
fn executed(name: &str, argv: &[&str]) -> Vec<u64> {
    let m = Machine::new(MachineConfig {
        cpus: vec![CpuState::Online; 1],
        ..MachineConfig::default()
    });
    let _g = m.enter();
    let image = programs::image(Arch::X86_64, name).unwrap();
    let (pid, tid) = m.spawn(Cred::root(), name);
    let path = format!("/usr/bin/{name}");
    let mut process = UserProcess::exec(&image, &path, argv, &[], pid as i32, 0).unwrap();
    let rec = Arc::new(Mutex::new(Recorder::default()));
    process.cpu().subscribe(Box::new(rec.clone())).unwrap();
    m.exec_user_thread(pid, &path, &image, UserThread::new(process, 10_000));
    m.switch_in(0, tid);
    while m.proc_info(pid).is_some_and(|p| !p.zombie) {
        m.tick(0);
    }
    rec.lock().unwrap().pcs.clone()
}

/// A decoded line: (thread, pc, image, symbol, offset).
fn parse(line: &str) -> (i32, u64, String, String, u64) {
    let f: Vec<&str> = line.split('\t').collect();
    assert_eq!(f.len(), 4, "{line:?}");
    let thr = f[0].strip_prefix("thr ").unwrap().parse().unwrap();
    let pc = f[1]
        .strip_prefix("pc 0x")
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let pc = u64::from_str_radix(pc, 16).unwrap();
    let (sym, off) = f[3].rsplit_once("+0x").unwrap();
    (
        thr,
        pc,
        f[2].trim().to_string(),
        sym.to_string(),
        u64::from_str_radix(off, 16).unwrap(),
    )
}

#[test]
fn a_traced_command_decodes_to_what_it_executes() {
    let files = scratch("calls");
    let root = files.to_str().unwrap();
    let out = hwt(&files, &["-b", "1048576", "-R", root, "calls", "300"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<_> = text.lines().map(parse).collect();
    let want = executed("calls", &["calls", "300"]);
    let got: Vec<u64> = lines.iter().map(|l| l.1).collect();
    assert_eq!(got.len(), want.len(), "{stderr}");
    assert!(
        got == want,
        "the decoded instructions are the executed ones"
    );
    // Each line names the function nm(1) would: the symbol table's.
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let symbols = ksim::elf::parse_symbols(&elf).unwrap();
    for (thr, pc, image, sym, off) in lines.iter().step_by(97) {
        assert_eq!(*thr, 0);
        assert_eq!(image, "calls");
        let s = symbols
            .iter()
            .find(|(_, a, n)| *pc >= *a && *pc < a + n.max(&1))
            .unwrap_or_else(|| panic!("{pc:#x} in no symbol"));
        assert_eq!((&s.0, pc - s.1), (sym, *off));
    }
}

#[test]
fn a_function_filter_keeps_that_function_only() {
    function_filter("run");
}

/// The filter on the entry point, whose first instructions run right
/// after the exec: they are traced only if the command paused there
/// (pause-on-mmap) until hwt(8) had set the filter and started.
#[test]
fn the_command_pauses_after_its_exec_until_the_filter_is_set() {
    function_filter("_start");
}

/// `hwt -i calls -f FUNC calls 200` decodes to exactly the instructions
/// of FUNC that the same program executes.
fn function_filter(func: &str) {
    let files = scratch(&format!("filter-{func}"));
    let root = files.to_str().unwrap();
    let out = hwt(
        &files,
        &["-R", root, "-i", "calls", "-f", func, "calls", "200"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let got: Vec<u64> = text.lines().map(|l| parse(l).1).collect();
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let symbols = ksim::elf::parse_symbols(&elf).unwrap();
    let (_, start, size) = symbols.iter().find(|s| s.0 == func).unwrap().clone();
    let want: Vec<u64> = executed("calls", &["calls", "200"])
        .into_iter()
        .filter(|&pc| pc >= start && pc < start + size)
        .collect();
    assert!(!want.is_empty());
    assert!(
        got == want,
        "got {} want {}: {stderr}",
        got.len(),
        want.len()
    );
    assert!(text.lines().all(|l| parse(l).3 == func));
}

#[test]
fn a_small_ring_loses_trace_says_so_and_goes_on() {
    let files = scratch("wrap");
    let root = files.to_str().unwrap();
    let out = hwt(&files, &["-b", "8192", "-R", root, "calls", "20000"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("buffer wrapped"), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let got: Vec<u64> = text.lines().map(|l| parse(l).1).collect();
    let want = executed("calls", &["calls", "20000"]);
    assert!(
        got.len() > 1000 && got.len() < want.len(),
        "{} of {}",
        got.len(),
        want.len()
    );
    // What was kept decodes to the end of the run.
    let tail = &want[want.len() - 200..];
    assert_eq!(&got[got.len() - 200..], tail);
}

#[test]
fn the_command_line_is_checked() {
    let files = scratch("usage");
    for (args, code) in [
        (&["-r", "calls"][..], 1),
        (&["-i", "calls", "calls"][..], 64),
        (&["-b", "12345", "calls"][..], 64),
        (&["-c", "spe", "calls"][..], 64),
        (&[][..], 64),
        (&["-h"][..], 64),
    ] {
        let out = hwt(&files, args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn columns_and_libxo_json_say_the_same_instructions() {
    let files = scratch("styles");
    let root = files.to_str().unwrap();
    let text = hwt(&files, &["-R", root, "calls", "20"]);
    assert!(text.status.success());
    let lines: Vec<_> = String::from_utf8(text.stdout)
        .unwrap()
        .lines()
        .map(parse)
        .collect();
    // -o: the columns asked, in that order.
    let cols = hwt(&files, &["-o", "symbol,pc,id", "-R", root, "calls", "20"]);
    assert!(cols.status.success());
    let cols = String::from_utf8(cols.stdout).unwrap();
    assert_eq!(cols.lines().count(), lines.len());
    for (c, l) in cols.lines().zip(&lines) {
        assert_eq!(
            c,
            format!("{}+{:#x}\tpc {:#010x}\tthr {}", l.3, l.4, l.1, l.0)
        );
    }
    // libxo's JSON, judged by Python's json module.
    let json = hwt(&files, &["--libxo", "json", "-R", root, "calls", "20"]);
    assert!(json.status.success());
    let check = Command::new("python3")
        .args([
            "-c",
            "import json,sys; d=json.load(sys.stdin); \
             print(len(d['hwt']['instruction'])); \
             print(' '.join(i['pc'] for i in d['hwt']['instruction'][:3])); \
             print(d['hwt']['instruction'][0]['symbol'])",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(&json.stdout)?;
            c.wait_with_output()
        })
        .expect("python3 runs");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let out = String::from_utf8(check.stdout).unwrap();
    let mut it = out.lines();
    assert_eq!(it.next().unwrap(), lines.len().to_string());
    let pcs: Vec<String> = lines[..3].iter().map(|l| format!("{:#x}", l.1)).collect();
    assert_eq!(it.next().unwrap(), pcs.join(" "));
    assert_eq!(
        it.next().unwrap(),
        format!("{}+{:#x}", lines[0].3, lines[0].4)
    );
    for bad in [
        &["-o", "pc,nothing", "calls"][..],
        &["--libxo", "yaml", "calls"][..],
    ] {
        assert_eq!(hwt(&files, bad).status.code(), Some(64), "{bad:?}");
    }
}

// CPU mode (-s): a private machine of two CPUs that runs `calls` while
// hwt traces the kernel; stopped with a signal, as one stops hwt there.

/// The simulated machine's environment for CPU mode: two CPUs, a
/// workload, its files written to `files`.
fn cpu_mode_command(files: &Path, args: &[&str]) -> Command {
    let mut c = hwt_command(files, args);
    c.env("LIBPMC_SIM_CPUS", "2")
        .env("LIBPMC_SIM_WORKLOAD", "calls:100000");
    c
}

/// Runs hwt in CPU mode with `args` until it runs (the machine wrote its
/// files), lets it trace for a while and sends it `signal`.
fn hwt_until_signal(files: &Path, args: &[&str], signal: libc::c_int) -> Output {
    let kernel = files.join("boot/kernel/kernel");
    let _ = std::fs::remove_file(&kernel);
    let child = cpu_mode_command(files, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hwt runs");
    let start = Instant::now();
    while !kernel.exists() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(kernel.exists(), "the machine booted and wrote its files");
    // Long enough for its set-up and a few context switches on a busy host.
    std::thread::sleep(Duration::from_millis(2000));
    // SAFETY: kill(2) of our own child, which has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
    child.wait_with_output().expect("hwt exits")
}

/// A function of the simulated kernel, as nm(1) reads the kernel that
/// the machine wrote to `files` (a run that fails on a function the
/// kernel lacks writes it), with its address.
fn kernel_function(files: &Path) -> (String, u64) {
    let out = cpu_mode_command(
        files,
        &["-s", "0", "-i", "kernel", "-f", "hwt_test_no_such_function"],
    )
    .output()
    .expect("hwt runs");
    assert_eq!(out.status.code(), Some(64));
    let nm = Command::new("nm")
        .arg(files.join("boot/kernel/kernel"))
        .output()
        .expect("nm runs");
    assert!(nm.status.success());
    let text = String::from_utf8(nm.stdout).unwrap();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "T")
                .then(|| (f[2].to_string(), u64::from_str_radix(f[0], 16).unwrap()))
        })
        .find(|(name, _)| name.starts_with("sys_"))
        .expect("the kernel has a sys_ function")
}

/// A PSB: 02 82 eight times.
const PSB: [u8; 16] = [
    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
];

/// The packets of `trace`, which must decode to its end without an error.
fn packets(trace: &[u8]) -> Vec<ipt::Packet> {
    let cfg = ipt::Config::new(trace);
    let mut dec = ipt::PacketDecoder::new(&cfg).unwrap();
    let (packets, error) = dec.dump();
    assert_eq!(error, None, "{packets:?}");
    packets
}

#[test]
fn cpu_mode_saves_each_cpus_raw_trace() {
    let files = scratch("cpu-raw");
    let root = files.to_str().unwrap();
    let (func, addr) = kernel_function(&files);
    let raw = files.join("raw");
    let out = hwt_until_signal(
        &files,
        &[
            "-b",
            "1048576",
            "-s",
            "0,1",
            "-R",
            root,
            "-i",
            "kernel",
            "-f",
            &func,
            "-r",
            "-w",
            raw.to_str().unwrap(),
        ],
        libc::SIGINT,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "", "no warning");
    assert!(!raw.exists(), "a file per CPU, none for the context");
    for cpu in 0..2 {
        let trace = std::fs::read(files.join(format!("raw{cpu}")))
            .unwrap_or_else(|e| panic!("raw{cpu}: {e}"));
        // The unit's enable: a PSB+ at the very start.
        assert!(
            trace.starts_with(&PSB),
            "CPU {cpu}: {:x?}",
            &trace[..trace.len().min(32)]
        );
        let p = packets(&trace);
        assert_eq!((p[0].offset, p[0].name), (0, "psb"));
        let end = p.iter().position(|p| p.name == "psbend").expect("a PSBEND");
        // RTIT_CTL.OS: the PSB+ tells the CR3 (PIP), which it does only
        // when the kernel is traced.
        assert!(
            p[..end].iter().any(|p| p.name == "pip"),
            "CPU {cpu}: OS traced: {p:?}"
        );
        // The kernel runs no instructions there and the user code that
        // runs is not traced (USER clear, and outside the filter): no
        // packet of traced code.
        for p in &p {
            assert!(
                !matches!(
                    p.name,
                    "tip.pge" | "tip.pgd" | "tip" | "fup" | "tnt.8" | "tnt.64"
                ),
                "CPU {cpu}: {p}"
            );
        }
        // Decoded with the function's range as the filter, against the
        // kernel: nothing executed and no error.
        let kernel = files.join("boot/kernel/kernel");
        let mut image = ipt::Image::new("kernel");
        let bytes = std::fs::read(&kernel).unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        for seg in object::Object::segments(&elf) {
            use object::ObjectSegment;
            let (off, size) = seg.file_range();
            image.add_file(&kernel, off, size, seg.address()).unwrap();
        }
        let cfg = ipt::Config::new(&trace).addr_filter(1, &[(addr, addr + 0xff)]);
        let mut dec = ipt::InsnDecoder::new(&cfg, &mut image).unwrap();
        let items = dec.decode_all();
        assert!(
            items.iter().all(|i| matches!(i, ipt::Item::Event(_))),
            "CPU {cpu}: {items:?}"
        );
    }
    // The CPU the workload and hwt ran on switched between them: a PIP
    // for each switch, after the PSB+.
    let switches: usize = (0..2)
        .map(|cpu| {
            let p = packets(&std::fs::read(files.join(format!("raw{cpu}"))).unwrap());
            let end = p.iter().position(|p| p.name == "psbend").unwrap();
            p[end..].iter().filter(|p| p.name == "pip").count()
        })
        .sum();
    assert!(switches > 0, "context switches traced");
}

#[test]
fn cpu_mode_decodes_each_cpu_to_a_file_of_its_own() {
    let files = scratch("cpu-decode");
    let root = files.to_str().unwrap();
    let (func, _) = kernel_function(&files);
    let out_path = files.join("out");
    let out = hwt_until_signal(
        &files,
        &[
            "-b",
            "1048576",
            "-s",
            "0 1",
            "-R",
            root,
            "-i",
            "kernel",
            "-f",
            &func,
            "-w",
            out_path.to_str().unwrap(),
        ],
        libc::SIGTERM,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "", "no decoding error, no warning");
    assert!(out.stdout.is_empty());
    assert!(!out_path.exists());
    for cpu in 0..2 {
        // The simulated kernel executes nothing: each CPU's decode is
        // empty (a trace that decoded to instructions would have lines).
        let text = std::fs::read_to_string(files.join(format!("out{cpu}")))
            .unwrap_or_else(|e| panic!("out{cpu}: {e}"));
        assert_eq!(text, "", "CPU {cpu}");
    }
    assert!(!files.join("out2").exists());
    // Without -w, the standard output: a JSON document with no
    // instruction.
    let json = hwt_until_signal(
        &files,
        &[
            "--libxo", "json", "-b", "1048576", "-s", "1", "-R", root, "-i", "kernel", "-f", &func,
        ],
        libc::SIGINT,
    );
    assert_eq!(json.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(json.stdout).unwrap(),
        "{\"hwt\": {\"instruction\": [\n\n]}}\n"
    );
}

#[test]
fn cpu_mode_command_lines_are_checked() {
    let files = scratch("cpu-usage");
    let root = files.to_str().unwrap();
    for (args, code, message) in [
        (
            &["-s", "0", "-i", "kernel", "-f", "hardclock", "calls"][..],
            64,
            "hwt: -s: CPU mode takes no command\n",
        ),
        (
            &["-s", "0", "-i", "kernel", "-f", "hardclock", "-P", "1"][..],
            64,
            "hwt: -s and -P: CPU mode traces CPUs, not a process\n",
        ),
        (&["-s", "0"][..], 64, "hwt: -s: CPU mode needs -i and -f\n"),
        (
            &["-s", "0", "-i", "kernel", "-f", "hardclock", "-t", "0"][..],
            1,
            "hwt: -t chooses a thread: thread mode only, not with -s\n",
        ),
        (
            &["-s", "0,x1", "-i", "kernel", "-f", "hardclock"][..],
            64,
            "hwt: -s: invalid CPU \"x1\": a number from 0 to 1023\n",
        ),
        (
            &["-s", "0\t1024", "-i", "kernel", "-f", "hardclock"][..],
            64,
            "hwt: -s: invalid CPU \"1024\": a number from 0 to 1023\n",
        ),
        (
            &["-s", "-1", "-i", "kernel", "-f", "hardclock"][..],
            64,
            "hwt: -s: invalid CPU \"-1\": a number from 0 to 1023\n",
        ),
        (
            &["-s", ", \t", "-i", "kernel", "-f", "hardclock"][..],
            64,
            "hwt: -s: no CPU in \", \t\"\n",
        ),
        (
            &[
                "-s",
                "0, 1",
                "-R",
                root,
                "-i",
                "kernel",
                "-f",
                "no_such_function",
            ][..],
            64,
            "hwt: function \"no_such_function\" not found in kernel\n",
        ),
        (
            &["-s", "1", "-R", root, "-i", "nosuch.ko", "-f", "hardclock"][..],
            64,
            "hwt: function \"hardclock\" not found in nosuch.ko\n",
        ),
    ] {
        let out = cpu_mode_command(&files, args).output().expect("hwt runs");
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).as_ref()
            ),
            (Some(code), message),
            "{args:?}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// The simulated machine keeps a traced command paused after its exec
/// (pause-on-mmap, as hwt(8)'s -i/-f sets it) however much time passes,
/// serving the tracer meanwhile, and the command runs once WAKEUP comes.
#[test]
fn a_traced_exec_pauses_until_wakeup_while_time_passes() {
    use pmc::libpmc_sim::{SimConfig, SimTransport};
    use uapi::hwt::*;
    use uapi::pt::{PtCpuConfig, RTIT_CTL_BRANCHEN, RTIT_CTL_USER};

    let sim = SimTransport::boot(SimConfig {
        cpus: 1,
        comm: "hwt-pause".into(),
        ..SimConfig::default()
    })
    .expect("a machine");
    let pid = sim.fork_held().expect("a held child");
    // ALLOC of a thread-mode context for it, as hwt(8) makes it.
    let ctl = sim.dev_open("/dev/hwt", true).expect("/dev/hwt");
    let mut arg = vec![0u8; 64];
    arg[0..8].copy_from_slice(&(1u64 << 20).to_ne_bytes());
    arg[8..12].copy_from_slice(&HWT_MODE_THREAD.to_ne_bytes());
    arg[12..16].copy_from_slice(&(pid as i32).to_ne_bytes());
    arg[48..52].copy_from_slice(&(-1i32).to_ne_bytes());
    let ident_region = (-1i32).to_ne_bytes().to_vec();
    let back = sim
        .dev_ioctl(
            ctl,
            HWT_IOC_ALLOC,
            &arg,
            vec![(32, b"pt\0".to_vec()), (40, ident_region)],
        )
        .expect("ALLOC");
    let ident = i32::from_ne_bytes(back[1][..4].try_into().unwrap());
    let dev = sim
        .dev_open(&format!("/dev/hwt_{ident}_{pid}"), true)
        .expect("the context's device");
    // SET_CONFIG with the pause, no START.
    let mut cfg = vec![0u8; std::mem::size_of::<PtCpuConfig>()];
    let at = std::mem::offset_of!(PtCpuConfig, rtit_ctl);
    cfg[at..at + 8].copy_from_slice(&(RTIT_CTL_USER | RTIT_CTL_BRANCHEN).to_ne_bytes());
    let mut arg = vec![0u8; 32];
    arg[0..4].copy_from_slice(&1i32.to_ne_bytes());
    arg[16..24].copy_from_slice(&(cfg.len() as u64).to_ne_bytes());
    arg[24..28].copy_from_slice(&1i32.to_ne_bytes());
    sim.dev_ioctl(dev, HWT_IOC_SET_CONFIG, &arg, vec![(8, cfg)])
        .expect("SET_CONFIG");
    sim.run_program(pid, "calls", &["1".into()])
        .expect("the command is released");
    // Time passes (the machine's other work would run; `calls 1` would
    // end in far less): the command stays in its exec, not exited.
    for _ in 0..20 {
        sim.advance(1000);
    }
    assert_eq!(sim.job_exited(pid), Some(false), "paused in its exec");
    // Its EXECUTABLE record is there for the tracer.
    let records = |sim: &SimTransport| {
        let arg = vec![0u8; 32];
        let back = sim
            .dev_ioctl(
                dev,
                HWT_IOC_RECORD_GET,
                &arg,
                vec![
                    (0, vec![0u8; hwt_ring::ENTRY * 16]),
                    (8, 16i32.to_ne_bytes().to_vec()),
                ],
            )
            .expect("RECORD_GET");
        let n = i32::from_ne_bytes(back[1][..4].try_into().unwrap()) as usize;
        back[0][..n * hwt_ring::ENTRY]
            .chunks(hwt_ring::ENTRY)
            .filter_map(hwt_ring::parse_record)
            .collect::<Vec<_>>()
    };
    let execs = records(&sim)
        .into_iter()
        .filter(|r| {
            matches!(r, hwt_ring::Record::Object { executable: true, path, .. }
                if path == "/usr/bin/calls")
        })
        .count();
    assert_eq!(execs, 1);
    // WAKEUP: the command goes on and runs to its end.
    sim.dev_ioctl(dev, HWT_IOC_WAKEUP, &[0u8; 16], Vec::new())
        .expect("WAKEUP");
    for _ in 0..200 {
        if sim.job_exited(pid) == Some(true) {
            break;
        }
        sim.advance(1000);
    }
    assert_eq!(sim.job_exited(pid), Some(true), "it ran after WAKEUP");
}

/// -i/-f on a function of a library the command maps at run time: hwt(8)
/// wakes the command at each pause until an MMAP record brings the
/// library, then traces that function alone. (The simulated machine does
/// not hold the pause at an mmap, which it serves between requests: the
/// calls made before hwt(8) read the record are not traced.)
#[test]
fn a_function_of_a_library_mapped_later_is_traced() {
    let files = scratch("libfilter");
    let root = files.to_str().unwrap();
    let out = hwt(
        &files,
        &[
            "-R",
            root,
            "-i",
            programs::SECOND_OBJECT,
            "-f",
            "second_entry",
            "mapobj",
            "300",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<_> = text.lines().map(parse).collect();
    assert!(!lines.is_empty(), "{stderr}");
    assert!(
        lines
            .iter()
            .all(|l| l.2.ends_with(programs::SECOND_OBJECT) && l.3 == "second_entry"),
        "{text}"
    );
    // Whole calls, each the same instructions from the function's start.
    let mut calls: Vec<Vec<u64>> = Vec::new();
    for l in &lines {
        if l.4 == 0 {
            calls.push(Vec::new());
        }
        calls
            .last_mut()
            .expect("a call starts at offset 0")
            .push(l.4);
    }
    assert!(calls.len() <= 300, "{} calls", calls.len());
    assert!(calls.iter().all(|c| *c == calls[0]), "{calls:?}");
}

/// -P: a process that runs already is traced from its attach on, and its
/// instructions decode against the images it had mapped before (which no
/// record tells: the machine's kinfo_getvmmap), to the tail of what the
/// program executes.
#[test]
fn an_attached_process_decodes_against_the_images_it_had_mapped() {
    let files = scratch("attach");
    let root = files.to_str().unwrap();
    let bin = ksimd::daemon::binary_beside(Path::new(env!("CARGO_BIN_EXE_hwt")));
    let daemon =
        ksimd::daemon::Daemon::start(&bin, &["-c", "1", "-r", "0", "-w", "calls:300", "-F", root])
            .expect("ksimd");
    let sock = daemon.socket();
    let sim = pmc::libpmc_sim::SimTransport::connect(
        sock.to_string_lossy().into_owned(),
        0,
        "hwt-test".into(),
    )
    .expect("a client");
    let pid = sim
        .processes()
        .expect("the processes")
        .into_iter()
        .find(|(_, comm)| comm == "calls")
        .expect("the workload runs")
        .0;
    // It runs a little before hwt attaches.
    sim.advance(2);
    assert_eq!(sim.job_exited(pid), Some(false), "still running");
    drop(sim);
    let out = Command::new(env!("CARGO_BIN_EXE_hwt"))
        .args(["-R", root, "-P", &pid.to_string()])
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_SOCKET", &sock)
        .output()
        .expect("hwt runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<_> = text.lines().map(parse).collect();
    assert!(!lines.is_empty(), "{stderr}");
    assert!(lines.iter().all(|l| l.2 == "calls"), "{text}");
    let got: Vec<u64> = lines.iter().map(|l| l.1).collect();
    let want = executed("calls", &["calls", "300"]);
    assert!(got.len() < want.len(), "the start was before the attach");
    assert!(
        got == want[want.len() - got.len()..],
        "the tail of what calls executes ({} of {})",
        got.len(),
        want.len()
    );
    assert!(daemon.stop().success(), "ksimd's checks at its stop");
}

/// -i/-f when the command's image cannot be read (not under -R): its
/// record still paused the command, which hwt(8) wakes; the command
/// runs to its end and hwt(8) says the function was not found, rather
/// than both waiting for ever.
#[test]
fn an_unreadable_image_is_woken_past_and_the_function_not_found() {
    let files = scratch("unreadable");
    let empty = files.join("empty-root");
    std::fs::create_dir_all(&empty).unwrap();
    let args = [
        "-R",
        empty.to_str().unwrap(),
        "-i",
        "calls",
        "-f",
        "run",
        "calls",
        "20",
    ];
    let mut child = hwt_command(&files, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hwt runs");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("hwt and its command wait for each other");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.ends_with("hwt: function \"run\" not found in calls\n"),
        "{stderr}"
    );
    assert!(stderr.contains("its code will not be decoded"), "{stderr}");
}

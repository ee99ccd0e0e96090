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

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

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

/// Runs hwt(8) with `args` on a private simulated machine whose files go
/// to `files`.
fn hwt(files: &PathBuf, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hwt"))
        .args(args)
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_FILES", files)
        .env_remove("LIBPMC_SIM_SOCKET")
        .output()
        .expect("hwt runs")
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
    let files = scratch("filter");
    let root = files.to_str().unwrap();
    let out = hwt(
        &files,
        &["-R", root, "-i", "calls", "-f", "run", "calls", "200"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let got: Vec<u64> = text.lines().map(|l| parse(l).1).collect();
    let elf = programs::image(Arch::X86_64, "calls").unwrap();
    let symbols = ksim::elf::parse_symbols(&elf).unwrap();
    let (_, start, size) = symbols.iter().find(|s| s.0 == "run").unwrap().clone();
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
    assert!(text.lines().all(|l| parse(l).3 == "run"));
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

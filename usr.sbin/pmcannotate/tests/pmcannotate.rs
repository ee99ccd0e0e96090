//! pmcannotate(8) end to end.
//!
//! The real case: a log of `sort` sampled on the retired instructions of
//! the simulated machine, made by the pmcstat(8) of this target directory
//! (built with its `sim` feature), the program's file written by the
//! machine under `root` (LIBPMC_SIM_FILES) and binutils' objdump(1). The
//! judge of the report is pmcstat's own `-m` list, read here
//! independently: the samples per PC and per function.
//!
//! The other cases run pmcannotate with small stand-ins for pmcstat(8)
//! and objdump(1) (shell scripts): what arguments they get, what happens
//! when they fail or print something unexpected, and the messages and
//! exit statuses of bad command lines.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

const PMCANNOTATE: &str = env!("CARGO_BIN_EXE_pmcannotate");

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn usage() -> String {
    format!(
        "usage: {PMCANNOTATE} [-a] [-h] [-k kfile] [-l lb] [-m mode] [-r fsroot] pmcraw.out binary\n"
    )
}

/// A directory of this process for the tests' files, its name with a
/// space and a quote so that no shell can be involved.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("pmcannotate test's {}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// A new empty directory under [`scratch`].
fn fresh_dir(what: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = scratch().join(format!("{what}.{}", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs pmcannotate with `args` and `env`, its temporary files in a
/// directory of their own, which must be empty again afterwards.
fn pmcannotate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let tmp = fresh_dir("tmp");
    let o = Command::new(PMCANNOTATE)
        .args(args)
        .env_remove("PMCSTAT")
        .env_remove("OBJDUMP")
        .env("TMPDIR", &tmp)
        .envs(env.iter().copied())
        .output()
        .expect("run pmcannotate");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
    o
}

/// The pmcstat(8) of this target directory (the one that built
/// pmcannotate, else the other profile's).
fn pmcstat() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = Path::new(PMCANNOTATE).parent().unwrap();
        let target = dir.parent().unwrap();
        [
            dir.join("pmcstat"),
            target.join("release/pmcstat"),
            target.join("debug/pmcstat"),
        ]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "these tests need this workspace's pmcstat, built with its simulator, \
                 beside {PMCANNOTATE} or in {}/release or debug: build it first \
                 (cargo build --release -p pmcstat --features pmc/sim,libpmcstat/sim,pmcstat/sim)",
                target.display()
            )
        })
        .to_string_lossy()
        .into_owned()
    })
}

/// One line of pmcstat's `-m` list.
#[derive(Debug, Clone)]
struct Sample {
    pc: u64,
    name: String,
    start: u64,
    end: u64,
}

/// A log of `sort` and the machine's files, made once for all tests.
struct Run {
    log: String,
    root: String,
    binary: String,
    samples: Vec<Sample>,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

fn run() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = fresh_dir("run");
        let log = dir.join("sort.log").to_string_lossy().into_owned();
        let root = dir.join("root").to_string_lossy().into_owned();
        let o = Command::new(pmcstat())
            .args(["-n", "20000", "-S", "instructions", "-l", "2", "-O", &log])
            .env("LIBPMC_TRANSPORT", "sim")
            .env("LIBPMC_SIM_CPUS", "1")
            .env("LIBPMC_SIM_WORKLOAD", "sort:100000")
            .env("LIBPMC_SIM_FILES", &root)
            .output()
            .expect("run pmcstat");
        assert!(
            o.status.success(),
            "{} could not sample the simulated machine (is it built with its sim feature?): {}",
            pmcstat(),
            text(&o.stderr)
        );
        // The judge: pmcstat's -m list on its standard output ("-"),
        // where its statistics follow.
        let o = Command::new(pmcstat())
            .args(["-R", &log, "-r", &root, "-m", "-"])
            .output()
            .expect("run pmcstat");
        assert!(o.status.success(), "{}", text(&o.stderr));
        let samples: Vec<Sample> = text(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("0x"))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(f.len(), 4, "{l}");
                Sample {
                    pc: hex(f[0]),
                    name: f[1].to_owned(),
                    start: hex(f[2]),
                    end: hex(f[3]),
                }
            })
            .collect();
        assert!(samples.len() > 200, "too few samples: {}", samples.len());
        let binary = Path::new(&root)
            .join("usr/bin/sort")
            .to_string_lossy()
            .into_owned();
        Run {
            log,
            root,
            binary,
            samples,
        }
    })
}

impl Run {
    /// Samples per function.
    fn per_function(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for s in &self.samples {
            *m.entry(s.name.clone()).or_insert(0) += 1;
        }
        m
    }

    /// Samples per PC of `function`.
    fn per_pc(&self, function: &str) -> BTreeMap<u64, u64> {
        let mut m = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.name == function) {
            *m.entry(s.pc).or_insert(0) += 1;
        }
        m
    }

    /// The bounds of `function`.
    fn bounds(&self, function: &str) -> (u64, u64) {
        let s = self.samples.iter().find(|s| s.name == function).unwrap();
        (s.start, s.end)
    }

    fn total(&self) -> u64 {
        self.samples.len() as u64
    }

    /// pmcannotate on this log and program, with the real pmcstat.
    fn annotate(&self, options: &[&str]) -> Output {
        let mut args = options.to_vec();
        args.extend(["-r", &self.root, &self.log, &self.binary]);
        let o = pmcannotate(&args, &[("PMCSTAT", pmcstat())]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        // pmcstat's statistics are not part of the report.
        assert!(text(&o.stderr).contains("CONVERSION STATISTICS"));
        assert!(!text(&o.stdout).contains("CONVERSION STATISTICS"));
        o
    }
}

/// One function of a report.
#[derive(Debug)]
struct Section {
    name: String,
    percent: f64,
    /// The lines: the count shown on the left, if any, and the line.
    lines: Vec<(Option<String>, String)>,
}

/// The report, checked for its layout.
fn sections(report: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let mut open = false;
    for line in report.lines() {
        if !open {
            let head = line
                .strip_prefix("Profile trace for function: ")
                .and_then(|l| l.strip_suffix("%]"))
                .unwrap_or_else(|| panic!("not a function's header: {line:?}"));
            let (name, percent) = head.split_once("() [").unwrap();
            let decimals = percent.split_once('.').unwrap().1;
            assert_eq!(decimals.len(), 2, "{line}");
            out.push(Section {
                name: name.to_owned(),
                percent: percent.parse().unwrap(),
                lines: Vec::new(),
            });
            open = true;
        } else if line.is_empty() {
            open = false;
        } else if let Some(rest) = line.strip_prefix("\t| ") {
            out.last_mut().unwrap().lines.push((None, rest.to_owned()));
        } else {
            assert_eq!(line.get(7..10), Some(" | "), "{line:?}");
            let count = line[..7].trim_start();
            assert!(!count.is_empty() && !count.contains(' '), "{line:?}");
            out.last_mut()
                .unwrap()
                .lines
                .push((Some(count.to_owned()), line[10..].to_owned()));
        }
    }
    assert!(!open, "the last function has no blank line after it");
    out
}

/// The address of one of objdump's assembly lines.
fn asm_address(line: &str) -> Option<u64> {
    let (addr, rest) = line.trim_start().split_once(':')?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    u64::from_str_radix(addr, 16).ok()
}

fn assert_percent(shown: f64, n: u64, of: u64, what: &str) {
    let exact = n as f64 * 100.0 / of as f64;
    assert!(
        (shown - exact).abs() <= 0.0051,
        "{what}: {shown} shown for {n} of {of} ({exact})"
    );
}

#[test]
fn functions_come_with_their_share_the_most_sampled_first() {
    let r = run();
    let expected = r.per_function();
    let o = r.annotate(&["-a", "-l", "0"]);
    let report = sections(&text(&o.stdout));
    let names: BTreeSet<&str> = report.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, expected.keys().map(String::as_str).collect());
    assert_eq!(names.len(), report.len(), "a function twice");
    let mut previous = u64::MAX;
    for s in &report {
        let n = expected[&s.name];
        assert_percent(s.percent, n, r.total(), &s.name);
        assert!(
            n <= previous,
            "{} ({n}) after a function of {previous}",
            s.name
        );
        previous = n;
    }
}

#[test]
fn assembly_counts_stand_at_exactly_the_sampled_addresses() {
    let r = run();
    let o = r.annotate(&["-a", "-m", "raw", "-l", "0"]);
    for s in sections(&text(&o.stdout)) {
        let expected = r.per_pc(&s.name);
        let (start, end) = r.bounds(&s.name);
        let mut shown = BTreeMap::new();
        for (count, line) in &s.lines {
            let pc = asm_address(line).unwrap_or_else(|| panic!("not assembly: {line:?}"));
            assert!((start..end).contains(&pc), "{pc:#x} outside {}", s.name);
            if let Some(count) = count {
                shown.insert(pc, count.parse::<u64>().unwrap());
            }
        }
        assert_eq!(shown, expected, "{}", s.name);
        let sum: u64 = shown.values().sum();
        assert_eq!(sum, r.per_function()[&s.name], "{}", s.name);
    }
}

#[test]
fn block_and_global_modes_show_shares_of_the_function_and_of_all() {
    let r = run();
    let per_function = r.per_function();
    for (mode, default) in [("block", false), ("global", false), ("block", true)] {
        let mut options = vec!["-a", "-l", "0"];
        if !default {
            options.extend(["-m", mode]);
        }
        let o = r.annotate(&options);
        for s in sections(&text(&o.stdout)) {
            let expected = r.per_pc(&s.name);
            for (count, line) in &s.lines {
                let Some(count) = count else { continue };
                let pc = asm_address(line).unwrap();
                let shown: f64 = count.strip_suffix('%').unwrap().parse().unwrap();
                let of = if mode == "block" {
                    per_function[&s.name]
                } else {
                    r.total()
                };
                assert_percent(shown, expected[&pc], of, line);
            }
        }
    }
}

#[test]
fn c_blocks_carry_the_samples_of_their_assembly() {
    let r = run();
    let o = r.annotate(&["-m", "RAW", "-l", "0"]);
    let report = sections(&text(&o.stdout));
    assert_eq!(report.len(), r.per_function().len());
    for s in report {
        assert!(!s.lines.is_empty(), "{} has no lines", s.name);
        let mut sum = 0;
        for (count, line) in &s.lines {
            // Only C is printed.
            assert_eq!(asm_address(line), None, "{line:?}");
            if let Some(count) = count {
                let n: u64 = count.parse().unwrap();
                assert!(n > 0);
                sum += n;
            }
        }
        assert_eq!(sum, r.per_function()[&s.name], "{}", s.name);
    }
}

#[test]
fn the_lower_bound_drops_the_functions_below_it() {
    let r = run();
    let expected = r.per_function();
    let total = r.total();
    let kept = |threshold: u64| -> BTreeSet<String> {
        expected
            .iter()
            .filter(|&(_, &n)| n >= threshold)
            .map(|(f, _)| f.clone())
            .collect()
    };
    let shown = |options: &[&str]| -> BTreeSet<String> {
        sections(&text(&r.annotate(options).stdout))
            .into_iter()
            .map(|s| s.name)
            .collect()
    };
    // The default, 0.5%.
    assert_eq!(shown(&["-a"]), kept(total / 200));
    // Just above the least sampled function.
    let least = *expected.values().min().unwrap();
    let lb = format!("{}", (least as f64 + 1.5) * 100.0 / total as f64);
    let above = kept(least + 1);
    assert!(above.len() < expected.len());
    assert_eq!(shown(&["-a", "-l", &lb]), above);
    // Everything: only a function with every sample would stay.
    assert_eq!(shown(&["-a", "-l", "100"]), kept(total));
}

/// Writes an executable shell script.
fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Stand-ins for pmcstat(8) and objdump(1) in `dir`: the first writes
/// $FAKE_MAP into the file after its `-m`, the second prints $FAKE_DUMP;
/// both record their arguments, one a line, and exit with $FAKE_STATUS_*.
/// With $FAKE_INTERRUPT, the first sends SIGINT to its process group, as
/// a terminal's interrupt key does.
fn stand_ins(dir: &Path) -> (String, String) {
    let pmcstat = dir.join("fake pmcstat");
    script(
        &pmcstat,
        "printf '%s\\n' \"$@\" > \"$FAKE_DIR/pmcstat.args\"\n\
         if [ -n \"$FAKE_INTERRUPT\" ]; then kill -INT 0; sleep 5; fi\n\
         echo 'CONVERSION STATISTICS:'\n\
         while [ $# -gt 0 ]; do\n\
         \tif [ \"$1\" = -m ]; then printf '%s' \"$FAKE_MAP\" > \"$2\"; fi\n\
         \tshift\n\
         done\n\
         exit ${FAKE_STATUS_PMCSTAT:-0}\n",
    );
    let objdump = dir.join("fake objdump");
    script(
        &objdump,
        "printf '%s\\n' \"$@\" >> \"$FAKE_DIR/objdump.args\"\n\
         printf '%s' \"$FAKE_DUMP\"\n\
         exit ${FAKE_STATUS_OBJDUMP:-0}\n",
    );
    (
        pmcstat.to_string_lossy().into_owned(),
        objdump.to_string_lossy().into_owned(),
    )
}

const FAKE_MAP: &str = "0x102 f 0x100 0x108\n0x102 f 0x100 0x108\n0x105 f 0x100 0x108\n\
                        0x200 g 0x200 0x204\n";

const FAKE_DUMP: &str = "\nbin:     file format elf64-x86-64\n\n\nDisassembly of section .text:\n\n\
                         0000000000000100 <f>:\nint\nf(void)\n  100:\t55\tpush %rbp\n\tx++;\n  \
                         102:\t90\tnop\n  105:\tc3\tret\n\n\
                         0000000000000200 <g>:\n}\n  200:\tc3\tret\n";

/// pmcannotate with the stand-ins, in `dir`, with more `env`.
fn with_stand_ins(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let (pmcstat, objdump) = stand_ins(dir);
    let dir_s = dir.to_string_lossy().into_owned();
    let mut all = vec![
        ("PMCSTAT", pmcstat.as_str()),
        ("OBJDUMP", objdump.as_str()),
        ("FAKE_DIR", dir_s.as_str()),
        ("FAKE_MAP", FAKE_MAP),
        ("FAKE_DUMP", FAKE_DUMP),
    ];
    all.extend_from_slice(env);
    let tmp = fresh_dir("tmp");
    // A process group of its own, for $FAKE_INTERRUPT.
    let o = Command::new(PMCANNOTATE)
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", &tmp)
        .envs(all.iter().copied())
        .process_group(0)
        .output()
        .expect("run pmcannotate");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
    o
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_programs_get_their_arguments_as_they_are() {
    let dir = fresh_dir("odd $(touch x); 'name'");
    let kernel = dir.join("kernel dir");
    std::fs::create_dir(&kernel).unwrap();
    let log = dir.join("a log;|&");
    std::fs::write(&log, "").unwrap();
    // A program whose name looks like an option.
    std::fs::write(dir.join("-bin"), "").unwrap();
    let (k, l) = (kernel.to_str().unwrap(), log.to_str().unwrap());
    let o = with_stand_ins(
        &dir,
        &["-k", k, "-r", "/a root", "-m", "raw", l, "-bin"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "Profile trace for function: f() [75.00%]\n\
         \t| int\n\t| f(void)\n      3 | \tx++;\n\n\
         Profile trace for function: g() [25.00%]\n      1 | }\n\n"
    );
    // The stand-in's "statistics" went to the standard error.
    assert_eq!(text(&o.stderr), "CONVERSION STATISTICS:\n");
    let args = lines_of(&dir.join("pmcstat.args"));
    assert_eq!(args[..6], ["-k", k, "-r", "/a root", "-R", l]);
    assert_eq!(args[6], "-m");
    let map = Path::new(&args[7]);
    let name = map.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("pmcannotate.") && name.len() == 18,
        "{name}"
    );
    assert_eq!(args.len(), 8);
    assert_eq!(
        lines_of(&dir.join("objdump.args")),
        [
            "--start-address=0x100",
            "--stop-address=0x108",
            "-S",
            "./-bin",
            "--start-address=0x200",
            "--stop-address=0x204",
            "-S",
            "./-bin",
        ]
    );
    assert!(!dir.join("x").exists());
}

#[test]
fn assembly_from_the_stand_ins() {
    let dir = fresh_dir("asm");
    std::fs::write(dir.join("log"), "").unwrap();
    let o = with_stand_ins(&dir, &["-a", "-m", "global", "log", "log"], &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "Profile trace for function: f() [75.00%]\n\
         \t|   100:\t55\tpush %rbp\n 50.00% |   102:\t90\tnop\n 25.00% |   105:\tc3\tret\n\n\
         Profile trace for function: g() [25.00%]\n 25.00% |   200:\tc3\tret\n\n"
    );
    assert_eq!(lines_of(&dir.join("objdump.args"))[2], "-d");
    // pmcstat is given no -k or -r of its own.
    assert_eq!(lines_of(&dir.join("pmcstat.args"))[..2], ["-R", "log"]);
}

#[test]
fn a_function_missing_from_objdumps_text_has_no_lines() {
    let dir = fresh_dir("missing");
    std::fs::write(dir.join("log"), "").unwrap();
    let dump = "\nbin:     file format elf64-x86-64\n\n  100:\t55\tpush %rbp\n";
    for mode in ["-a", "-l0"] {
        let o = with_stand_ins(&dir, &[mode, "log", "log"], &[("FAKE_DUMP", dump)]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(
            text(&o.stdout),
            "Profile trace for function: f() [75.00%]\n\n\
             Profile trace for function: g() [25.00%]\n\n"
        );
    }
}

#[test]
fn failures_of_the_programs_and_of_their_output() {
    let dir = fresh_dir("failures");
    std::fs::write(dir.join("log"), "").unwrap();
    let (pmcstat, objdump) = stand_ins(&dir);
    let exe = PMCANNOTATE;
    let cases: Vec<(Vec<(&str, &str)>, String)> = vec![
        (
            vec![("FAKE_STATUS_PMCSTAT", "3")],
            format!(
                "{exe}: {pmcstat}: exited with status 3\n{exe}: Impossible to create the tmp file\n"
            ),
        ),
        // An interrupt from the terminal ends pmcstat, not pmcannotate,
        // which cleans up and says so (system(3)'s way).
        (
            vec![("FAKE_INTERRUPT", "1")],
            format!(
                "{exe}: {pmcstat}: terminated by signal 2\n{exe}: Impossible to create the tmp file\n"
            ),
        ),
        (
            vec![("PMCSTAT", "/nonexistent/pmcstat")],
            format!(
                "{exe}: /nonexistent/pmcstat: No such file or directory\n\
                 {exe}: Impossible to create the tmp file\n"
            ),
        ),
        (
            vec![("FAKE_STATUS_OBJDUMP", "2")],
            format!(
                "{exe}: {objdump}: exited with status 2\n{exe}: Impossible to create the tmp file\n"
            ),
        ),
        (
            vec![("FAKE_MAP", "0x102 f 0x100 0x108\n0x105 f\n")],
            format!("{exe}: Invalid scan of function in the map file\n"),
        ),
        (
            vec![("FAKE_MAP", "garbage\n")],
            format!("{exe}: Invalid scan of function in the map file\n"),
        ),
    ];
    for (env, expected) in cases {
        let o = with_stand_ins(&dir, &["log", "log"], &env);
        assert_eq!(o.status.code(), Some(1), "{env:?}");
        let stderr = text(&o.stderr).replace("CONVERSION STATISTICS:\n", "");
        assert_eq!(stderr, expected, "{env:?}");
        assert_eq!(text(&o.stdout), "", "{env:?}");
    }
    // C text whose first block has no C: what was printed stays.
    let dump = "0000000000000100 <f>:\n  100:\t55\tpush %rbp\n";
    let o = with_stand_ins(&dir, &["log", "log"], &[("FAKE_DUMP", dump)]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stdout),
        "Profile trace for function: f() [75.00%]\n"
    );
    assert_eq!(
        text(&o.stderr),
        format!("CONVERSION STATISTICS:\n{exe}: Invalid format for the C file\n")
    );
    // An empty list: an empty report.
    let o = with_stand_ins(&dir, &["log", "log"], &[("FAKE_MAP", "")]);
    assert!(o.status.success());
    assert_eq!(text(&o.stdout), "");
}

#[test]
fn bad_command_lines() {
    let dir = fresh_dir("usage");
    let file = dir.join("file");
    std::fs::write(&file, "").unwrap();
    let file = file.to_str().unwrap();
    let missing = dir.join("missing");
    let missing = missing.to_str().unwrap();
    let exe = PMCANNOTATE;
    let enoent = format!("{exe}: No such file or directory\n");
    let cases: Vec<(Vec<&str>, i32, String)> = vec![
        (
            vec![file, missing],
            1,
            format!("{enoent}{exe}: Impossible to locate the binary file\n"),
        ),
        // The program is looked at first.
        (
            vec![missing, missing],
            1,
            format!("{enoent}{exe}: Impossible to locate the binary file\n"),
        ),
        (
            vec![missing, file],
            1,
            format!("{enoent}{exe}: Impossible to locate the pmcstat file\n"),
        ),
        (
            vec!["-k", missing, file, file],
            1,
            format!("{enoent}{exe}: Impossible to locate the kernel file\n"),
        ),
        (
            vec!["-m", "cycles", file, file],
            1,
            "pmcannotate: Invalid mode cycles\n".to_owned(),
        ),
        // In order: the mode is refused before -h is seen.
        (
            vec!["-m", "x", "-h"],
            1,
            "pmcannotate: Invalid mode x\n".to_owned(),
        ),
        (vec!["-h"], 0, usage()),
        (vec!["-h", "-m", "x", file, file], 0, usage()),
        (vec![file], 1, usage()),
        (vec![], 1, usage()),
        (vec![file, file, file], 1, usage()),
        (
            vec!["-z", file, file],
            1,
            format!("pmcannotate: illegal option -- z\n{}", usage()),
        ),
        // Options end at the first operand: "-l" is the program.
        (
            vec![file, "-l"],
            1,
            format!("{enoent}{exe}: Impossible to locate the binary file\n"),
        ),
        (
            vec!["-l"],
            1,
            format!("pmcannotate: option requires an argument -- l\n{}", usage()),
        ),
    ];
    for (args, status, expected) in cases {
        let o = pmcannotate(&args, &[("PMCSTAT", "/nonexistent/pmcstat")]);
        assert_eq!(o.status.code(), Some(status), "{args:?}");
        assert_eq!(text(&o.stderr), expected, "{args:?}");
        assert_eq!(text(&o.stdout), "", "{args:?}");
    }
}

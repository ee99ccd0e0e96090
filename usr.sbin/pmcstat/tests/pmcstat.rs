//! pmcstat(8) end to end on the simulated machine (LIBPMC_TRANSPORT=sim,
//! 4 CPUs, hz 1000): counting output in FreeBSD's column format, sampling
//! logs to a file, a pipe and a TCP peer, the -R text dump, and FreeBSD's
//! argument checks with their messages and exit codes.
//!
//! What the simulated machine does is known: while pmcstat waits it runs
//! on CPU 0, so SOFT-CLOCK.HARD fires 1000 times per simulated second
//! there and never on the idle CPUs.

use std::process::{Command, Output};

/// pmcstat with `args` on a simulated 4-CPU machine.
fn sim_pmcstat(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pmcstat"));
    c.args(args)
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_CPUS", "4");
    c
}

fn pmcstat(args: &[&str]) -> Output {
    sim_pmcstat(args).output().expect("run pmcstat")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tmp(name: &str) -> String {
    std::env::temp_dir()
        .join(format!("pmcstat-test-{}-{name}", std::process::id()))
        .to_string_lossy()
        .into_owned()
}

/// FreeBSD's column layout for a counter of `width` bits.
/// Bits per decimal digit, as FreeBSD's pmcstat writes it (log2(10) to
/// six places); kept so column widths match.
#[allow(clippy::approx_constant)]
const DIGITS_PER_BIT_DIVISOR: f64 = 3.32193;

fn column(name: &str, system: bool, width: u32) -> (usize, usize) {
    let mut header = name.len() + 2;
    if system {
        header += 3;
    }
    let display = (f64::from(width) / DIGITS_PER_BIT_DIVISOR).floor() as usize + 1;
    if header > display {
        (header, 0)
    } else {
        (display, display - header)
    }
}

#[test]
fn system_counting_prints_a_column_per_cpu_every_interval() {
    let o = pmcstat(&["-s", "SOFT-CLOCK.HARD", "-w", "1", "-l", "3"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "counts go to stderr by default");
    let err = text(&o.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let (fw, skip) = column("SOFT-CLOCK.HARD", true, 64);
    let mut want_header = String::from("# ");
    for cpu in 0..4 {
        want_header += &format!(
            "{}s/{cpu:02}/{:<w$} ",
            " ".repeat(skip),
            "SOFT-CLOCK.HARD",
            w = fw - skip - 5
        );
    }
    assert_eq!(lines[0], want_header);
    assert_eq!(lines.len(), 4, "header and one line per second: {err:?}");
    for l in &lines[1..] {
        assert_eq!(
            *l,
            format!(
                "{:>w0$} {:>w$} {:>w$} {:>w$} ",
                1000,
                0,
                0,
                0,
                w0 = fw + 2,
                w = fw
            )
        );
    }
}

#[test]
fn cumulative_counts_grow() {
    let o = pmcstat(&[
        "-C",
        "-c",
        "0",
        "-s",
        "SOFT-CLOCK.HARD",
        "-w",
        "1",
        "-l",
        "3",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let values: Vec<u64> = err
        .lines()
        .skip(1)
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(values, [1000, 2000, 3000]);
}

#[test]
fn process_counting_on_a_target() {
    // pid 0 is the caller: pmcstat counts its own ticks.
    let o = pmcstat(&[
        "-p",
        "SOFT-CLOCK.HARD",
        "-t",
        "0",
        "-w",
        "2",
        "-l",
        "4",
        "-o",
        &tmp("proc.out"),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = std::fs::read_to_string(tmp("proc.out")).unwrap();
    std::fs::remove_file(tmp("proc.out")).unwrap();
    let (fw, skip) = column("SOFT-CLOCK.HARD", false, 64);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "# {}p/{:>w$} ",
            " ".repeat(skip),
            "SOFT-CLOCK.HARD",
            w = fw - skip - 2
        )
    );
    assert_eq!(
        &lines[1..],
        [
            format!("{:>w$} ", 2000, w = fw + 2),
            format!("{:>w$} ", 2000, w = fw + 2)
        ]
    );
    assert!(!out.ends_with("\n\n"), "no extra newline with -o");

    let o = pmcstat(&["-p", "SOFT-CLOCK.HARD", "-t", "99999", "-l", "1"]);
    assert_eq!(o.status.code(), Some(65));
    assert_eq!(
        text(&o.stderr),
        "pmcstat: ERROR: No processes were attached to.\n"
    );
}

/// Checks a -R dump of a sampling run on CPU 0: `n` samples.
fn check_dump(dump: &str, samples: usize) {
    let lines: Vec<&str> = dump.lines().collect();
    // The default simulated machine is a Skylake client part.
    assert_eq!(lines[0], "initlog   0xa030000 \"INTEL_SKYLAKE\"");
    // The CLOSELOG record that ends the log prints nothing, as in
    // FreeBSD (its reader returns EOF for it).
    assert!(!lines.iter().any(|l| l.starts_with("closelog")), "{dump}");
    let chains: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("callchain "))
        .collect();
    assert_eq!(chains.len(), samples, "{dump}");
    for (i, l) in lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("callchain "))
    {
        let f: Vec<&str> = l.split(' ').filter(|s| !s.is_empty()).collect();
        assert!(f[1].parse::<i32>().unwrap() > 0, "{l}");
        assert!(f[2].starts_with("0x"), "{l}");
        assert_eq!(
            &f[3..],
            ["0", "1", "s"],
            "CPU 0, one frame, kernel mode: {l}"
        );
        assert!(lines[i + 1].starts_with("...       0x"), "{}", lines[i + 1]);
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("allocatedyn 0x") && l.contains("\"CLOCK.HARD\""))
    );
}

#[test]
fn sampling_to_a_file_then_reading_it_back() {
    let log = tmp("samples.log");
    let o = pmcstat(&[
        "-c",
        "0",
        "-n",
        "1000",
        "-S",
        "SOFT-CLOCK.HARD",
        "-l",
        "3.5",
        "-O",
        &log,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = pmcstat(&["-R", &log]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // 3500 ticks at one sample per 1000.
    check_dump(&text(&o.stdout), 3);
    // -o sends the dump to a file.
    let o = pmcstat(&["-R", &log, "-o", &tmp("dump.txt")]);
    assert!(o.status.success() && o.stdout.is_empty());
    check_dump(&std::fs::read_to_string(tmp("dump.txt")).unwrap(), 3);
    std::fs::remove_file(tmp("dump.txt")).unwrap();
    std::fs::remove_file(&log).unwrap();
}

#[test]
fn sampling_without_a_log_file_prints_the_records_live() {
    let o = pmcstat(&[
        "-c",
        "0",
        "-n",
        "1000",
        "-S",
        "SOFT-CLOCK.HARD",
        "-l",
        "2.5",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
    check_dump(&text(&o.stderr), 2);
}

#[test]
fn the_live_dump_prints_records_while_the_run_goes_on() {
    use std::io::BufRead;
    // A run far longer than the test (100,000 simulated seconds): its
    // records must appear as the driver writes them, as FreeBSD's
    // pmcstat prints from its non-blocking pipe whenever data arrives,
    // not when the run ends. Log buffers of 1 KiB (the default 256 KiB
    // would take thousands of samples to fill) make the driver write
    // after a few dozen samples.
    let mut child = sim_pmcstat(&[
        "-c",
        "0",
        "-n",
        "1000",
        "-S",
        "SOFT-CLOCK.HARD",
        "-l",
        "100000",
    ])
    .env("LIBPMC_SIM_KENV", "kern.hwpmc.logbuffersize=1")
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    // A generous bound on the wait: this is about printing before the
    // end or not, not about speed.
    let seen: Vec<String> =
        std::iter::from_fn(|| rx.recv_timeout(std::time::Duration::from_secs(60)).ok())
            .take_while(|l| !l.starts_with("..."))
            .collect();
    assert!(
        seen.iter().any(|l| l.starts_with("callchain ")),
        "no sample printed while the run goes on: {seen:?}"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run is still going on"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn sampling_to_a_tcp_peer() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let peer = format!("127.0.0.1:{port}");
    let reader = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
        .args(["-R", &peer])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader listens once it has started.
    let mut tries = 0;
    loop {
        let o = pmcstat(&[
            "-c",
            "0",
            "-n",
            "1000",
            "-S",
            "SOFT-CLOCK.HARD",
            "-l",
            "1.5",
            "-O",
            &peer,
        ]);
        if o.status.success() {
            break;
        }
        tries += 1;
        assert!(tries < 100, "{}", text(&o.stderr));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = reader.wait_with_output().unwrap();
    assert!(out.status.success());
    check_dump(&text(&out.stdout), 1);
}

#[test]
fn unreadable_and_corrupt_logs() {
    let o = pmcstat(&["-R", "/nonexistent/log"]);
    assert_eq!(o.status.code(), Some(71));
    assert_eq!(
        text(&o.stderr),
        "pmcstat: ERROR: Cannot open \"/nonexistent/log\" for reading: No such file or directory.\n"
    );
    let log = tmp("corrupt.log");
    let o = pmcstat(&[
        "-c",
        "0",
        "-n",
        "1000",
        "-S",
        "SOFT-CLOCK.HARD",
        "-l",
        "1.5",
        "-O",
        &log,
    ]);
    assert!(o.status.success());
    let mut bytes = std::fs::read(&log).unwrap();
    // Break the magic byte of the second record, found from the first
    // record's length.
    let first_len = u16::from_ne_bytes([bytes[0], bytes[1]]) as usize;
    bytes[first_len + 3] = 0x11;
    std::fs::write(&log, &bytes).unwrap();
    let o = pmcstat(&["-R", &log]);
    std::fs::remove_file(&log).unwrap();
    assert_eq!(o.status.code(), Some(65));
    assert_eq!(
        text(&o.stdout).lines().count(),
        1,
        "the records before the damage are printed"
    );
    assert_eq!(
        text(&o.stderr),
        format!("pmcstat: ERROR: event parsing failed (record 2, offset {first_len:#x}).\n")
    );
}

#[test]
fn freebsds_argument_checks() {
    let cases: &[(&[&str], i32, &str)] = &[
        (&[], 64, "[options] [commandline]"),
        (
            &["-O", "x", "-R", "y"],
            64,
            "ERROR: options -O and -R are mutually exclusive.",
        ),
        (
            &["-R", "y", "-t", "1"],
            64,
            "ERROR: option -R may not be used with option -t.",
        ),
        (
            &["-s", "TSC", "-R", "y"],
            64,
            "ERROR: option -R may not be used with a PMC event specification.",
        ),
        (
            &["-s", "TSC", "-t", "1"],
            64,
            "ERROR: option -t requires a process mode PMC to be specified.",
        ),
        (
            &["-d", "-s", "TSC"],
            64,
            "ERROR: options -d, -E, -p, -P, and -W require a command line or target process.",
        ),
        (
            &["-p", "TSC"],
            64,
            "ERROR: options -P and -p require a target process or a command line.",
        ),
        (
            &["-p", "SOFT-CLOCK.HARD", "-t", "0", "-c", "0"],
            64,
            "ERROR: option -c requires at least one system mode PMC to be specified.",
        ),
        (
            &["-C", "-S", "SOFT-CLOCK.HARD"],
            64,
            "ERROR: options -C, -W and -o require at least one counting mode PMC to be specified.",
        ),
        (
            &["-n", "5", "-s", "TSC"],
            64,
            "ERROR: options -N, -n and -O require at least one sampling mode PMC to be specified.",
        ),
        (
            &["-O", "x", "-s", "TSC"],
            64,
            "ERROR: option -O is used only with options -E, -P, -S and -W.",
        ),
        (
            &["-s", "TSC", "-S", "SOFT-CLOCK.HARD"],
            64,
            "ERROR: option -O is required if counting and sampling PMCs are specified together.",
        ),
        (
            &["-c", "1-3", "-s", "TSC"],
            64,
            "ERROR: Illegal CPU specification \"1-3\".",
        ),
        (
            &["-w", "0", "-s", "TSC"],
            64,
            "ERROR: Illegal wait interval value \"0\".",
        ),
        (
            &["-l", "x", "-s", "TSC"],
            64,
            "ERROR: Illegal duration time value \"x\".",
        ),
        (
            &["-n", "0", "-S", "TSC"],
            64,
            "ERROR: Illegal count value \"0\".",
        ),
        (
            &["-O", "a", "-O", "b"],
            64,
            "ERROR: option -O may only be specified once.",
        ),
        (
            &["-R", "a", "-R", "b"],
            64,
            "ERROR: option -R may only be specified once.",
        ),
        (
            &["-s", "NO_SUCH_EVENT"],
            71,
            "ERROR: Cannot allocate system-mode pmc with specification \"NO_SUCH_EVENT\": Invalid argument",
        ),
        (
            &["-m", "out", "-s", "TSC"],
            64,
            "ERROR: option -m requires an input file",
        ),
        (
            &["-g", "-R", "/nonexistent"],
            71,
            "ERROR: Cannot open \"/nonexistent\" for reading: No such file or directory.",
        ),
        (
            &["-T", "-s", "TSC"],
            64,
            "ERROR: options -g/-G/-m/-T require sampling PMCs or -R to be specified.",
        ),
        (
            &["-T", "-l", "1", "-S", "SOFT-CLOCK.HARD"],
            64,
            "ERROR: options -T and -l are mutually exclusive.",
        ),
        (
            &["-t", "^make$", "-p", "SOFT-CLOCK.HARD"],
            65,
            "ERROR: No matching target processes.",
        ),
        (
            &["-t", "(make", "-p", "SOFT-CLOCK.HARD"],
            65,
            "ERROR: Failed to compile regex \"(make\": ",
        ),
        (
            &["-s", "TSC", "nosuch"],
            71,
            "ERROR: execvp \"nosuch\" failed: No such file or directory",
        ),
        (
            &["-L"],
            64,
            "pmu features not supported on host or hwpmc not loaded",
        ),
        (&["-q", "-b"], 64, "illegal option -- b"),
        (&["-q", "-x"], 64, "option requires an argument -- x"),
        (&["-Z"], 64, "[options] [commandline]"),
        (
            &["-c", "2,0,0", "-s", "NO_SUCH_EVENT"],
            71,
            "Cannot allocate system-mode pmc",
        ),
    ];
    // A CPU without event tables, for the -L case.
    assert_refused(cases, |args| {
        sim_pmcstat(args)
            .env("LIBPMC_SIM_CPUID", "GenuineIntel-6-55-4")
            .output()
            .unwrap()
    });
}

/// Each command line of `cases` ends with its exit status and a message
/// that holds its text.
fn assert_refused(cases: &[(&[&str], i32, &str)], run: impl Fn(&[&str]) -> Output) {
    for (args, code, msg) in cases {
        let o = run(args);
        assert_eq!(
            o.status.code(),
            Some(*code),
            "{args:?}: {}",
            text(&o.stderr)
        );
        assert!(
            text(&o.stderr).contains(msg),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn an_unknown_workload_fails_initialisation() {
    let o = sim_pmcstat(&["-s", "TSC"])
        .env("LIBPMC_SIM_WORKLOAD", "make")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(69));
    assert_eq!(
        text(&o.stderr),
        "libpmc: simulated machine: LIBPMC_SIM_WORKLOAD=\"make\" is not work or \
         work:THREADS (THREADS from 1 to 64), or a program [arm64/]NAME[:ARG,...] with \
         NAME one of sort, calls, recurse, syscalls, faults, threads, mapobj, rdpmc\n\
         pmcstat: ERROR: Initialization of the pmc(3) library failed: Invalid argument\n"
    );
    let o = sim_pmcstat(&["-s", "TSC"])
        .env("LIBPMC_SIM_KENV", "kern.hwpmc.logbuffersize=4,nbuffers")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(69));
    assert!(
        text(&o.stderr).starts_with(
            "libpmc: simulated machine: LIBPMC_SIM_KENV=\"kern.hwpmc.logbuffersize=4,nbuffers\" \
             is not NAME=VALUE pairs separated by commas\n"
        ),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn without_a_driver_initialisation_fails() {
    let o = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
        .args(["-s", "TSC"])
        .env_remove("LIBPMC_TRANSPORT")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(69));
    assert_eq!(
        text(&o.stderr),
        "pmcstat: ERROR: Initialization of the pmc(3) library failed: No such file or directory\n"
    );
}

#[test]
fn a_long_live_run_does_not_stall_on_a_full_pipe() {
    // About 1700 records: more than a pipe holds, read as they come.
    let o = pmcstat(&[
        "-c",
        "0",
        "-n",
        "1000",
        "-S",
        "SOFT-CLOCK.HARD",
        "-w",
        "100",
        "-l",
        "1700.5",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    check_dump(&text(&o.stderr), 1700);
}

#[test]
fn an_interrupt_ends_the_run_without_another_line() {
    use std::io::BufRead;
    let mut child = sim_pmcstat(&["-c", "0", "-s", "TSC", "-w", "0.01"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Signal it once it is counting (it has printed its header and a
    // line), not while it starts, when SIGINT would still kill it.
    let mut reader = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut err = String::new();
    while err.lines().count() < 2 {
        assert_ne!(reader.read_line(&mut err).unwrap(), 0, "{err}");
    }
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    std::io::Read::read_to_string(&mut reader, &mut err).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{err}");
    assert!(err.starts_with("#             s/00/TSC \n"), "{err}");
    assert!(
        err.lines().count() > 2,
        "it printed lines until interrupted"
    );
    // Each line of counts starts with a newline; FreeBSD's adds the last
    // one only at a normal end, and prints nothing more after SIGINT.
    assert!(err.ends_with(' '), "{err:?}");
}

/// Numbers as FreeBSD's pmcstat reads them (strtod(3) and strtol(3)
/// over the whole argument, an int for -z, a uint64_t for -n), and -f
/// options, which only the calltree of -F checks.
#[test]
fn numbers_and_plugin_options_as_freebsd_reads_them() {
    let refused: &[(&[&str], i32, &str)] = &[
        (
            &["-w", "1 ", "-s", "TSC"],
            64,
            "ERROR: Illegal wait interval value \"1 \".",
        ),
        (
            &["-l", "inf", "-s", "TSC"],
            64,
            "ERROR: Illegal duration time value \"inf\".",
        ),
        (
            &["-n", "0", "-S", "TSC"],
            64,
            "ERROR: Illegal count value \"0\".",
        ),
        (
            &["-R", "y", "-G", "-", "-z", "0.5"],
            64,
            "ERROR: Illegal callchain depth \"0.5\".",
        ),
        (
            &["-F", "/dev/null", "-f", "foo", "-S", "SOFT-CLOCK.HARD"],
            64,
            "ERROR: unknown option <foo>.",
        ),
        (
            &[
                "-S",
                "SOFT-CLOCK.HARD",
                "-G",
                "/nonexistent/dir/g",
                "-l",
                "0.1",
            ],
            71,
            "ERROR: cannot open \"/nonexistent/dir/g\" for writing",
        ),
    ];
    assert_refused(refused, pmcstat);
    let graph = tmp("live.graph");
    let _ = std::fs::remove_file(&graph);
    let log = tmp("numbers.log");
    let taken: &[&[&str]] = &[
        // A hexadecimal interval, leading blanks.
        &["-c", "0", "-s", "TSC", "-w", "0x1p-2", "-l", " 0.5"],
        // -1 is the largest count.
        &["-n", "-1", "-S", "SOFT-CLOCK.HARD", "-O", &log, "-l", "0.1"],
        // An option the call graph has no use for is ignored; the file
        // of -G is made when a live run starts.
        &[
            "-S",
            "SOFT-CLOCK.HARD",
            "-G",
            &graph,
            "-f",
            "foo",
            "-O",
            &log,
            "-l",
            "0.1",
        ],
    ];
    for args in taken {
        let o = pmcstat(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    }
    assert_eq!(std::fs::metadata(&graph).map(|m| m.len()).ok(), Some(0));
    let _ = std::fs::remove_file(&graph);
    let _ = std::fs::remove_file(&log);
}

#[test]
fn a_live_run_shuts_its_analysis_down_as_freebsds() {
    // FreeBSD's pmcstat prints a live run's log as text and, at the end,
    // shuts the plugins down on what they saw (nothing) and prints the
    // statistics of -v: -F's file gets the calltree's header and root,
    // the print file the statistics' header (every line with -v -v), and
    // -g with -v -v the map's header; so does -M when -R prints a log.
    let tree = tmp("live.tree");
    let log = tmp("live-tree.log");
    // A tenth of a second of clock-tick sampling into the log, with
    // `options` first; its standard error, the run having succeeded.
    let measure = |options: &[&str]| {
        let mut args = options.to_vec();
        args.extend_from_slice(&["-S", "SOFT-CLOCK.HARD", "-O", &log, "-l", "0.1"]);
        let o = pmcstat(&args);
        assert!(o.status.success(), "{options:?}: {}", text(&o.stderr));
        text(&o.stderr)
    };
    assert_eq!(measure(&["-F", &tree]), "CONVERSION STATISTICS:\n");
    assert_eq!(
        std::fs::read_to_string(&tree).unwrap(),
        "version: 1\ncreator: pmcstat\npositions: instr line\nevents:\nsummary:\nfn=root\n0x0 1\n"
    );
    assert_eq!(measure(&["-q", "-F", &tree]), "");
    let err = measure(&["-v", "-v", "-g"]);
    assert!(err.starts_with("MAP:\nCONVERSION STATISTICS:\n"), "{err}");
    assert!(
        err.ends_with(" #callchain/dubious-frames                0\n"),
        "{err}"
    );
    // Without an analysis, no statistics.
    assert_eq!(measure(&[]), "");
    // The log printed by -R: -M's map has its header.
    let map = tmp("printed.map");
    let o = pmcstat(&["-R", &log, "-M", &map]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with("initlog "),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(std::fs::read_to_string(&map).unwrap(), "MAP:\n");
    for f in [&tree, &log, &map] {
        let _ = std::fs::remove_file(f);
    }
}

#[test]
fn a_cpu_list_is_a_set() {
    let o = pmcstat(&["-c", "2,0, 0", "-s", "TSC", "-w", "1", "-l", "1"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let header: Vec<&str> = err.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["#", "s/00/TSC", "s/02/TSC"]);
}

fn pmcstat_with_workload(args: &[&str]) -> Output {
    sim_pmcstat(args)
        .env("LIBPMC_SIM_WORKLOAD", "work:6")
        .output()
        .expect("run pmcstat")
}

#[test]
fn a_multithreaded_workload_keeps_every_cpu_busy() {
    // Six threads share four CPUs: every CPU takes its clock tick with a
    // thread running, 1000 times a second.
    let o = pmcstat_with_workload(&["-s", "SOFT-CLOCK.HARD", "-w", "1", "-l", "2"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    for l in err.lines().skip(1) {
        let v: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(v, ["1000", "1000", "1000", "1000"], "{err}");
    }
}

#[test]
fn system_wide_sampling_of_the_workload() {
    let log = tmp("workload.log");
    let o = pmcstat_with_workload(&[
        "-n",
        "1000",
        "-S",
        "SOFT-CLOCK.HARD",
        "-l",
        "3.5",
        "-O",
        &log,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = pmcstat(&["-R", &log]);
    std::fs::remove_file(&log).unwrap();
    let dump = text(&o.stdout);
    let lines: Vec<&str> = dump.lines().collect();
    // The workload's process, its exec mapping and six threads.
    let create = lines
        .iter()
        .find(|l| l.starts_with("create ") && l.ends_with("\"work\""))
        .expect("the workload's process");
    let pid: i32 = create.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        lines.contains(&format!("map-in    {pid} 0x400000 \"/usr/bin/work\"").as_str()),
        "{dump}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("thr-create ") && l.ends_with("\"work\""))
            .count(),
        6
    );
    // Three samples per CPU, all in the workload, in user mode, with the
    // sampled PC inside /usr/bin/work's text.
    let mut per_cpu = [0; 4];
    for (i, l) in lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("callchain "))
    {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f[1].parse::<i32>().unwrap(), pid, "{l}");
        assert_eq!(f[5], "u", "{l}");
        per_cpu[f[3].parse::<usize>().unwrap()] += 1;
        let pc = u64::from_str_radix(
            lines[i + 1]
                .split_whitespace()
                .nth(1)
                .unwrap()
                .trim_start_matches("0x"),
            16,
        )
        .unwrap();
        assert!((0x40_0000..0x50_0000).contains(&pc), "{}", lines[i + 1]);
    }
    assert_eq!(per_cpu, [3, 3, 3, 3]);
}

#[test]
fn counting_a_command_until_it_exits() {
    // `work 2.5 2`: two threads for 2.5 simulated seconds, 1000 clock
    // ticks per second each.
    let o = pmcstat(&["-p", "SOFT-CLOCK.HARD", "-w", "1", "work", "2.5", "2"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let values: Vec<u64> = err
        .lines()
        .skip(1)
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(
        values,
        [2000, 2000, 1000],
        "a line a second, and the last at the exit: {err:?}"
    );
    assert!(
        err.ends_with(" \n"),
        "the final line, then FreeBSD's extra newline: {err:?}"
    );
}

#[test]
fn sampling_a_command() {
    let log = tmp("command.log");
    let o = pmcstat(&[
        "-n",
        "1000",
        "-P",
        "SOFT-CLOCK.HARD",
        "-O",
        &log,
        "work",
        "2",
        "3",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = pmcstat(&["-R", &log]);
    std::fs::remove_file(&log).unwrap();
    let dump = text(&o.stdout);
    let lines: Vec<&str> = dump.lines().collect();
    // The command is attached before it runs, then execs /usr/bin/work.
    let attach = lines
        .iter()
        .find(|l| l.starts_with("attach "))
        .expect("the attach record");
    let pid = attach.split_whitespace().nth(2).unwrap();
    assert!(
        lines.iter().any(|l| l.starts_with("exec ")
            && l.split_whitespace().nth(2) == Some(pid)
            && l.ends_with("\"/usr/bin/work\"")),
        "{dump}"
    );
    // Three threads of 2000 events each: one sample each at a count of
    // 1000 (the first sample comes at event 1001).
    let chains: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("callchain "))
        .collect();
    assert_eq!(chains.len(), 3, "{dump}");
    assert!(
        chains
            .iter()
            .all(|l| l.split_whitespace().nth(1) == Some(pid))
    );
}

#[test]
fn lists_and_describes_the_cpus_pmu_events() {
    let o = pmcstat(&["-L"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    // The simulated machine is a Skylake client part by default: every
    // event of the skylake table, a tab before each name.
    let skylake = pmc::libpmc_pmu_util::PmuTable::for_cpuid("GenuineIntel-6-5E-3").unwrap();
    assert_eq!(
        out.lines().count(),
        skylake.model.events.iter().filter(|e| e.is_named()).count()
    );
    assert!(out.lines().any(|l| l == "\tbr_inst_retired.all_branches"));
    assert!(out.lines().all(|l| l.starts_with('\t')));
    // Another CPU key, another table.
    let o = sim_pmcstat(&["-L"])
        .env("LIBPMC_SIM_CPUID", "GenuineIntel-6-3C-3")
        .output()
        .unwrap();
    assert!(text(&o.stdout).contains("\toffcore_response.all_data_rd.l3_miss.any_response\n"));
    let o = pmcstat(&["-u", "longest_lat_cache"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        text(&o.stdout),
        "longest_lat_cache.miss:\tCore-originated cacheable demand requests missed L3. Spec update: SKL057\n\
         longest_lat_cache.reference:\tCore-originated cacheable demand requests that refer to L3. Spec update: SKL057\n"
    );
}

#[test]
fn targets_chosen_by_a_regular_expression() {
    // The workload is /usr/bin/work with six threads; nothing else on the
    // machine is called "work".
    let o = pmcstat_with_workload(&["-t", "^w.rk$", "-p", "SOFT-CLOCK.HARD", "-l", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // Counts go to standard error without -o, as FreeBSD's.
    let out = text(&o.stderr);
    let count: u64 = out
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {out:?}"));
    // Six threads on four CPUs for 2 s at hz 1000: the process has the
    // four CPUs' 8000 ticks, less a little for the program itself.
    assert!((7000..=8000).contains(&count), "{out}");
}

/// A hardware event of the CPU's PMU table, on a machine whose driver has
/// no hardware class (the simulator has SOFT and TSC only): FreeBSD's
/// libpmc fails the allocation, and pmcstat stops before printing any
/// column, instead of counting another event under the name.
#[test]
fn a_hardware_event_the_driver_lacks_fails_the_allocation() {
    // Sapphire Rapids has tables in libpmc but no classes in FreeBSD 15's
    // driver.
    let cases: [(&[&str], &str); 2] = [
        (&["-s", "instructions", "-w", "1", "-l", "1"], "system"),
        (
            &["-p", "instructions", "-t", "0", "-w", "1", "-l", "1"],
            "process",
        ),
    ];
    for (args, mode) in cases {
        let o = sim_pmcstat(args)
            .env("LIBPMC_SIM_CPUID", "GenuineIntel-6-8F-4")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(71), "{}", text(&o.stderr));
        assert_eq!(
            text(&o.stderr),
            format!(
                "pmcstat: ERROR: Cannot allocate {mode}-mode pmc with specification \
                 \"instructions\": Invalid argument\n"
            )
        );
        assert!(o.stdout.is_empty(), "no column: {}", text(&o.stdout));
    }
}

/// The simulated driver's FreeBSD errno values reach pmcstat's messages as
/// the host's: EOPNOTSUPP (45 on FreeBSD, "Level 2 not synchronized" on
/// Linux if passed through) for a TSC PMC, which cannot sample.
#[test]
fn a_driver_error_is_told_in_the_hosts_words() {
    let log = tmp("tsc.log");
    let o = pmcstat(&["-S", "TSC", "-O", &log, "-l", "1"]);
    let _ = std::fs::remove_file(&log);
    assert_eq!(o.status.code(), Some(71), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr),
        "pmcstat: ERROR: Cannot allocate system-mode pmc with specification \"TSC\": \
         Operation not supported\n"
    );
}

/// The driver's extended error follows the errno's text, as FreeBSD's
/// err(3) adds it: a second TSC PMC on the one CPU finds no free row.
#[test]
fn the_drivers_extended_error_ends_the_message() {
    let o = sim_pmcstat(&["-s", "TSC", "-s", "TSC", "-c", "0", "-l", "1"])
        .output()
        .expect("run pmcstat");
    assert_eq!(o.status.code(), Some(71), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr),
        "pmcstat: ERROR: Cannot allocate system-mode pmc with specification \"TSC\": \
         Invalid argument (extended error No PMC row accepted)\n"
    );
}

/// A target pid that the simulated machine does not have: nothing to
/// attach to, and pmcstat says so at once.
#[test]
fn a_target_pid_that_does_not_exist() {
    let started = std::time::Instant::now();
    let o = pmcstat(&["-p", "SOFT-CLOCK.HARD", "-t", "1000000000", "-w", "1"]);
    assert_eq!(o.status.code(), Some(65), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stderr),
        "pmcstat: ERROR: No processes were attached to.\n"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

/// `-t` patterns are POSIX extended regular expressions compiled by the C
/// library's regcomp(3), as in FreeBSD's pmcstat: bounds work, and a bad
/// pattern is reported with regerror(3)'s words.
#[test]
fn target_patterns_are_regcomp_extended_expressions() {
    let o = pmcstat_with_workload(&[
        "-p",
        "SOFT-CLOCK.HARD",
        "-t",
        "^wo(r){1}k$",
        "-w",
        "1",
        "-l",
        "1",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("p/SOFT-CLOCK.HARD"),
        "{}",
        text(&o.stderr)
    );
    // err(EX_DATAERR), as FreeBSD's: the reason, then errno's text.
    let o = pmcstat(&["-p", "SOFT-CLOCK.HARD", "-t", "(make"]);
    assert_eq!(o.status.code(), Some(65));
    let reason = if cfg!(all(target_os = "linux", target_env = "gnu")) {
        "Unmatched ( or \\("
    } else {
        "parentheses not balanced"
    };
    let no_error = std::io::Error::from_raw_os_error(0).to_string();
    let no_error = no_error.split(" (os error").next().unwrap();
    assert_eq!(
        text(&o.stderr),
        format!("pmcstat: ERROR: Failed to compile regex \"(make\": {reason}: {no_error}\n")
    );
}

/// Arguments are taken as the bytes they are (getopt(3) over OsString):
/// one that is not UTF-8 is refused with a message naming it, never a
/// panic.
#[test]
fn arguments_that_are_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let run = |args: &[&[u8]]| {
        Command::new(env!("CARGO_BIN_EXE_pmcstat"))
            .args(args.iter().map(|a| OsStr::from_bytes(a)))
            .env("LIBPMC_TRANSPORT", "sim")
            .output()
            .unwrap()
    };
    for (args, msg) in [
        (
            &[&b"-O"[..], b"log\xff"][..],
            "pmcstat: ERROR: the argument \"log\\xff\" of option -O is not valid UTF-8.\n",
        ),
        (
            &[&b"-sTSC\xfe"[..]][..],
            "pmcstat: ERROR: the argument \"TSC\\xfe\" of option -s is not valid UTF-8.\n",
        ),
        (
            &[&b"-s"[..], b"TSC", b"work", b"\xff"][..],
            "pmcstat: ERROR: the command line argument \"\\xff\" is not valid UTF-8.\n",
        ),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", text(&o.stderr));
        assert_eq!(text(&o.stderr), msg, "{args:?}");
    }
    for (args, first) in [
        (&[&b"-\xe9"[..]][..], "pmcstat: illegal option -- \\xe9\n"),
        (
            &[&b"-qw"[..]][..],
            "pmcstat: option requires an argument -- w\n",
        ),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(err.starts_with(first), "{args:?}: {err}");
        assert!(err.contains("[options] [commandline]"), "{err}");
    }
}

#[test]
fn a_clocked_daemon_paces_intervals_while_another_client_watches() {
    use std::io::BufRead;
    let bin = ksimd::daemon::binary_beside(std::path::Path::new(env!("CARGO_BIN_EXE_pmcstat")));
    // Four simulated seconds per host second: `-w 1` prints every 0.25 s.
    let daemon = ksimd::daemon::Daemon::start(&bin, &["-c", "1", "-r", "4"]).unwrap();
    let sock = daemon.socket();
    let start = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
        .args(["-c", "0", "-s", "TSC", "-w", "1", "-l", "4"])
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_SOCKET", &sock)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let header = lines.next().unwrap().unwrap();
    assert!(header.contains("TSC"), "{header}");
    // Another client of the same machine sees pmcstat's PMC on CPU 0's
    // TSC row, owned by pmcstat's own pid.
    let watcher = pmc::pmc::Pmc::init(Box::new(
        pmc::libpmc_sim::SimTransport::connect(sock.to_string_lossy().into(), 0, "watch".into())
            .unwrap(),
    ))
    .unwrap();
    let rows = watcher.pmcinfo(0).unwrap();
    let tsc = rows
        .iter()
        .find(|r| r.pm_class == uapi::pmc::PmcClass::Tsc as u32)
        .expect("a TSC row");
    assert_eq!(tsc.pm_ownerpid, child.id() as i32);
    let mut at = Vec::new();
    for line in lines.by_ref().take(4) {
        let line = line.unwrap();
        assert!(line.trim().parse::<u64>().is_ok(), "{line}");
        at.push(start.elapsed());
    }
    assert!(child.wait().unwrap().success());
    // Four intervals of a simulated second at four per host second: the
    // machine's clock paced them (without it they come at once).
    assert!(at[3] >= std::time::Duration::from_millis(750), "{at:?}");
    let rows = watcher.pmcinfo(0).unwrap();
    let tsc = rows
        .iter()
        .find(|r| r.pm_class == uapi::pmc::PmcClass::Tsc as u32)
        .unwrap();
    assert_eq!(tsc.pm_ownerpid, -1, "released when pmcstat ended");
    drop(watcher);
    assert!(daemon.stop().success(), "ksimd's checks at its stop");
}

/// The last line of counts pmcstat printed (to standard error without -o).
fn last_counts(out: &str) -> Vec<u64> {
    out.lines()
        .rev()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn hardware_events_count_a_real_program_on_the_simulated_pmu() {
    // calls runs on the machine's CPUs; its process is the target. Models
    // whose event tables the workspace's test data has: Skylake (v4, 4+3),
    // Ice Lake (v5, 8+4), Haswell (v3, 4+3).
    for cpuid in [
        "GenuineIntel-6-5E-3",
        "GenuineIntel-6-7E-5",
        "GenuineIntel-6-3C-3",
    ] {
        let o = sim_pmcstat(&[
            "-t",
            "^calls$",
            "-p",
            "instructions",
            "-p",
            "cycles",
            "-p",
            "branches",
            "-l",
            "1",
        ])
        .env("LIBPMC_SIM_WORKLOAD", "calls:2000")
        .env("LIBPMC_SIM_CPUID", cpuid)
        .output()
        .unwrap();
        assert_eq!(o.status.code(), Some(0), "{cpuid}: {}", text(&o.stderr));
        let counts = last_counts(&text(&o.stderr));
        assert_eq!(counts.len(), 3, "{cpuid}: {}", text(&o.stderr));
        let (insts, cycles, branches) = (counts[0], counts[1], counts[2]);
        // A second at 10,000 instructions a tick, user and kernel work
        // together; cycles are at least one per instruction.
        assert!(
            (100_000..=10_000_000).contains(&insts),
            "{cpuid}: {counts:?}"
        );
        assert!(cycles >= insts, "{cpuid}: {counts:?}");
        assert!(branches > 0 && branches < insts, "{cpuid}: {counts:?}");
    }
}

#[test]
fn hardware_sampling_takes_a_sample_per_period_and_the_tables_default() {
    for (rate, args) in [
        (10_000u64, &["-n", "10000"][..]),
        // inst_retired.any_p's SampleAfterValue in the skylake table.
        (2_000_003, &[][..]),
    ] {
        let log = tmp(&format!("hw-{rate}.log"));
        // -n sets the rate of the sampling PMCs that follow it (pmcstat.8,
        // as in FreeBSD's pmcstat): it comes before -P.
        let mut all = vec!["-t", "^calls$"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-P", "instructions", "-O", &log, "-l", "2"]);
        // calls:50000 retires about 17.1 million instructions and exits,
        // about 1.7 s at 10,000 instructions a tick (calls:5000 retired
        // 1.7 million, too few for the bounds below).
        let o = sim_pmcstat(&all)
            .env("LIBPMC_SIM_WORKLOAD", "calls:50000")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let dump = pmcstat(&["-R", &log]);
        assert!(dump.status.success(), "{}", text(&dump.stderr));
        let samples = text(&dump.stdout)
            .lines()
            .filter(|l| l.starts_with("callchain "))
            .count() as u64;
        let _ = std::fs::remove_file(&log);
        // At most two seconds of the program at up to 10,000 instructions
        // a tick.
        let most = 2 * 1000 * 10_000 / rate;
        assert!(samples <= most, "{rate}: {samples} samples");
        if rate == 10_000 {
            assert!(samples >= most / 2, "{rate}: {samples} samples");
        } else {
            // A few (8): the table's rate, not pmcstat's 65536.
            assert!((1..=10).contains(&samples), "{rate}: {samples} samples");
        }
    }
}

#[test]
fn more_pmcs_than_counters_fail_as_on_freebsd() {
    // Five programmable-counter events on the four IAP rows of CPU 0.
    let mut args = vec!["-c", "0"];
    for _ in 0..5 {
        args.extend_from_slice(&["-s", "br_inst_retired.all_branches"]);
    }
    args.extend_from_slice(&["-l", "1"]);
    let o = pmcstat(&args);
    assert_eq!(o.status.code(), Some(71), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("Cannot allocate system-mode pmc with specification \"br_inst_retired.all_branches\": Invalid argument"),
        "{}",
        text(&o.stderr)
    );
}

/// The `-Q` lines of a run: (PMC id, CPU, notifications, samples,
/// dropped, end) each.
fn notify_lines(err: &str) -> Vec<(String, u32, u64, u64, u64, bool)> {
    err.lines()
        .filter_map(|l| l.strip_prefix("pmcstat: notify pmc "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(
                (f[1], f[3], f[5], f[7]),
                ("cpu", "notifications", "samples", "dropped"),
                "{l}"
            );
            let n = |i: usize| f[i].parse::<u64>().unwrap_or_else(|_| panic!("{l}"));
            (
                f[0].to_owned(),
                n(2) as u32,
                n(4),
                n(6),
                n(8),
                f.get(9) == Some(&"end"),
            )
        })
        .collect()
}

#[test]
fn a_line_per_notification_with_q() {
    let log = tmp("notify.log");
    let o = pmcstat_with_workload(&[
        "-Q",
        "2",
        "-n",
        "1000",
        "-S",
        "SOFT-CLOCK.HARD",
        "-l",
        "8.5",
        "-O",
        &log,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let lines = notify_lines(&err);
    // Every CPU's PMC: 8 samples, a notification every 2, then its end.
    let mut pmcs: Vec<&str> = lines.iter().map(|l| l.0.as_str()).collect();
    pmcs.sort_unstable();
    pmcs.dedup();
    assert_eq!(pmcs.len(), 4, "{err}");
    for pmc in pmcs {
        let mine: Vec<_> = lines.iter().filter(|l| l.0 == pmc).collect();
        let cpu = mine[0].1;
        let mut last = 0;
        for l in &mine {
            assert_eq!(l.1, cpu, "one CPU per system PMC: {err}");
            assert_eq!(l.2, l.3 / 2, "a notification every 2 samples: {err}");
            assert!(l.2 >= last, "{err}");
            assert_eq!(l.4, 0, "{err}");
            last = l.2;
        }
        let end = mine.last().unwrap();
        assert!(end.5, "the last line ends the PMC: {err}");
        assert_eq!((end.2, end.3), (4, 8), "{err}");
        assert_eq!(mine.iter().filter(|l| l.5).count(), 1, "{err}");
    }
    // The log holds the samples the lines counted.
    let dump = text(&pmcstat(&["-R", &log]).stdout);
    std::fs::remove_file(&log).unwrap();
    assert_eq!(
        dump.lines().filter(|l| l.starts_with("callchain ")).count(),
        4 * 8
    );

    for bad in ["0", "-3", "two", "4294967296"] {
        let o = pmcstat(&["-Q", bad, "-S", "SOFT-CLOCK.HARD", "-O", "/dev/null"]);
        assert_eq!(o.status.code(), Some(64), "-Q {bad}");
        assert!(
            text(&o.stderr).contains(&format!("Illegal notification count \"{bad}\"")),
            "{}",
            text(&o.stderr)
        );
    }
}

//! pmccontrol(8) end to end: the binary run on the simulated machine
//! (LIBPMC_TRANSPORT=sim), its output checked against FreeBSD's formats
//! and the machine's known classes, events and CPUs, and its usage errors
//! and exit codes against FreeBSD's.

use std::process::{Command, Output};

fn pmccontrol(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmccontrol"))
        .args(args)
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_CPUS", "4")
        .output()
        .expect("run pmccontrol")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn pmccontrol_on(cpuid: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmccontrol"))
        .args(args)
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_CPUS", "4")
        .env("LIBPMC_SIM_CPUID", cpuid)
        .output()
        .expect("run pmccontrol")
}

/// On a CPU with a PMU event table (the default Skylake) -L prints the
/// table's events and nothing else, as FreeBSD's pmccontrol does
/// (pmc_pmu_print_counters).
#[test]
fn list_events_prints_the_pmu_table_where_there_is_one() {
    let o = pmccontrol(&["-L"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let table = pmc::libpmc_pmu_util::PmuTable::for_cpuid("GenuineIntel-6-5E-3").unwrap();
    let mut want = Vec::new();
    table.print_counters(None, &mut want).unwrap();
    assert_eq!(out.as_bytes(), want, "the table's names and nothing else");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"\tinst_retired.any"), "{lines:?}");
    assert!(lines.iter().all(|l| l.starts_with('\t')), "no class lines");
}

/// Without a table, each class of the machine and the events of libpmc's
/// table for it: the kernel's soft events, the TSC's "cycles", and on an
/// AMD processor without a table the K8 class's events.
#[test]
fn list_events_prints_each_class_and_its_events_without_a_table() {
    let o = pmccontrol_on("AuthenticAMD-25-01", &["-L"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    let classes: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with('\t'))
        .collect();
    assert_eq!(classes, ["SOFT", "TSC", "K8"], "{out}");
    let events_of = |class: &str| -> Vec<&str> {
        let at = lines.iter().position(|l| *l == class).unwrap();
        lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with('\t'))
            .map(|l| &l[1..])
            .collect()
    };
    let soft = events_of("SOFT");
    for e in [
        "CLOCK.HARD",
        "CLOCK.STAT",
        "CLOCK.PROF",
        "PAGE_FAULT.ALL",
        "PAGE_FAULT.READ",
        "PAGE_FAULT.WRITE",
    ] {
        assert!(soft.contains(&e), "{e} in {soft:?}");
    }
    assert_eq!(events_of("TSC"), ["cycles"]);
    let k8 = events_of("K8");
    assert_eq!(k8.len(), 80);
    assert_eq!(
        (k8[0], k8[79]),
        ("FP_DISPATCHED_FPU_OPS", "NB_HT_BUS2_BANDWIDTH")
    );
}

#[test]
fn list_state_prints_every_cpus_rows() {
    let o = pmccontrol(&["-l"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines();
    let first = lines.next().unwrap();
    let words: Vec<&str> = first.split(' ').collect();
    // The default simulated machine is a Skylake client part.
    assert_eq!(&words[..3], ["4", "INTEL_SKYLAKE", "CPUs"], "{first}");
    assert_eq!(&words[4..7], ["with", words[5], "PMCs"]);
    let npmc: usize = words[5].parse().unwrap();
    // SOFT's 16, TSC, four IAP and three IAF rows.
    assert_eq!(npmc, 16 + 1 + 4 + 3);
    let rest: Vec<&str> = lines.collect();
    assert_eq!(
        rest.len(),
        4 * (2 + npmc),
        "4 CPUs, each a title, a header and its rows"
    );
    for cpu in 0..4 {
        let block = &rest[cpu * (2 + npmc)..(cpu + 1) * (2 + npmc)];
        assert_eq!(block[0], format!("#CPU {cpu}:"));
        assert_eq!(block[1], "#N  NAME             CLASS  STATE    ROW-DISP");
        for (n, row) in block[2..].iter().enumerate() {
            let cols: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cols[0], n.to_string(), "{row}");
            let class = match n {
                0..16 => "SOFT",
                16 => "TSC",
                17..21 => "IAP",
                _ => "IAF",
            };
            assert_eq!(cols[2], class, "{row}");
            if class.starts_with("IA") {
                let first = if class == "IAP" { 17 } else { 21 };
                assert_eq!(cols[1], format!("{class}-{}", n - first), "{row}");
            }
            assert_eq!(&cols[3..5], ["ENABLED", "FREE"], "{row}");
            // FreeBSD's columns: " %-2d %-16s %-6s %-8s %-10s".
            assert_eq!(
                row.len(),
                1 + 2 + 1 + 16 + 1 + 6 + 1 + 8 + 1 + 10,
                "{row:?}"
            );
        }
    }
}

#[test]
fn statistics_are_eight_labelled_counters() {
    let o = pmccontrol(&["-s"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let labels = [
        "interrupts processed:",
        "non-PMC interrupts:",
        "sampling stalls due to space shortages:",
        "system calls:",
        "system calls with errors:",
        "buffer requests:",
        "buffer requests failed:",
        "sampling log sweeps:",
    ];
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), labels.len());
    for (line, label) in lines.iter().zip(labels) {
        assert_eq!(&line[..label.len()], label);
        assert_eq!(
            line.as_bytes()[40],
            b' ',
            "labels are padded to 40: {line:?}"
        );
        let value: i64 = line[41..].parse().unwrap();
        assert!(value >= 0);
    }
    // pmc_init's handshake, CPU and event queries went before.
    let syscalls: i64 = lines[3][41..].parse().unwrap();
    assert!(syscalls >= 3, "{syscalls}");
}

#[test]
fn enabling_and_disabling_rows_succeeds_in_range() {
    for args in [
        &["-c", "1", "-d", "0"][..],
        &["-c", "*", "-e", "*"],
        &["-d", "1", "-e", "1"],
        &["-c", "0x2", "-d", "00"],
        // What strtoul(3) takes: leading blanks, a sign, nothing at all.
        &["-c", " 1", "-d", "+2"],
        &["-c", "", "-e", "-0"],
    ] {
        let o = pmccontrol(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
}

#[test]
fn bad_usage_is_refused_as_freebsd_refuses_it() {
    let cases: &[(&[&str], i32, &str)] = &[
        (&[], 64, "Usage:"),
        (&["-q"], 64, "Unrecognized option \"-q\""),
        (&["-c"], 64, "Missing argument to option '-c'"),
        (&["-c", "x", "-d", "0"], 65, "\"x\" is not a valid CPU id"),
        // strtoul(3) over the whole argument, into an int that must not
        // be negative.
        (
            &["-c", "0+1", "-d", "0"],
            65,
            "\"0+1\" is not a valid CPU id",
        ),
        (&["-c", "-1", "-d", "0"], 65, "\"-1\" is not a valid CPU id"),
        (
            &["-c", "4294967295", "-d", "0"],
            65,
            "\"4294967295\" is not a valid CPU id",
        ),
        (&["-e", "0x+1"], 65, "\"0x+1\" is not a valid PMC id"),
        (&["-e", "1z"], 65, "\"1z\" is not a valid PMC id"),
        (&["-c", "9", "-d", "0"], 65, "CPU id too large: \"9\""),
        (&["-d", "99"], 65, "PMC id too large: \"99\""),
        (&["-c", "1"], 64, "No PMCs specified to enable or disable"),
        (&["-l", "-s"], 64, ""),
        (&["-d", "0", "-L"], 64, ""),
    ];
    for (args, code, msg) in cases {
        let o = pmccontrol(args);
        assert_eq!(o.status.code(), Some(*code), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(msg), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
}

#[test]
fn without_a_driver_initialisation_fails() {
    let o = Command::new(env!("CARGO_BIN_EXE_pmccontrol"))
        .arg("-l")
        .env_remove("LIBPMC_TRANSPORT")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(69));
    assert_eq!(
        stderr(&o),
        "pmccontrol: Initialization of the pmc(3) library failed: No such file or directory\n"
    );
}

/// Runs `cmd`, killing it after `secs` seconds: its output, or None when
/// it had to be killed (it hung).
fn within(mut cmd: Command, secs: u64) -> Option<Output> {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if child.try_wait().expect("wait").is_some() {
            return Some(child.wait_with_output().expect("output"));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// More clock ticks per call than the simulator takes are refused at
/// once, naming the variable and its value, instead of every request
/// running for days of simulated time.
#[test]
fn too_many_ticks_per_call_are_refused_not_run() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pmccontrol"));
    cmd.arg("-L")
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_TICKS_PER_CALL", "1000000000");
    let o = within(cmd, 30).expect("pmccontrol ends");
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("LIBPMC_SIM_TICKS_PER_CALL=\"1000000000\" is not a number of clock ticks from 0 to 100000"),
        "{err}"
    );
}

fn sim_run(args: &[&str]) -> Output {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/sim-run");
    let mut cmd = Command::new(script);
    cmd.args(args);
    within(cmd, 30).expect("tools/sim-run ends")
}

/// tools/sim-run names a bad option value instead of leaving pmc_init's
/// bare "Invalid argument".
#[test]
fn sim_run_names_a_bad_value() {
    let bin = env!("CARGO_BIN_EXE_pmccontrol");
    for (args, said) in [
        (["-c", "0"], "tools/sim-run: -c '0': the number of CPUs"),
        (
            ["-c", "many"],
            "tools/sim-run: -c 'many': the number of CPUs",
        ),
        (["-w", "wrok"], "tools/sim-run: -w 'wrok': the workload is"),
        (
            ["-w", "work:99"],
            "tools/sim-run: -w 'work:99': the threads",
        ),
        (
            ["-t", "1000000000"],
            "tools/sim-run: -t '1000000000': the ticks",
        ),
    ] {
        let o = sim_run(&[args[0], args[1], bin, "-L"]);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).starts_with(said), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
    let o = sim_run(&["-c", "2", "-w", "work:3", bin, "-L"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// The library, too, names a bad variable of the simulated machine.
#[test]
fn a_bad_machine_variable_is_named() {
    for (var, value) in [("LIBPMC_SIM_CPUS", "0"), ("LIBPMC_SIM_WORKLOAD", "work:0")] {
        let o = Command::new(env!("CARGO_BIN_EXE_pmccontrol"))
            .arg("-L")
            .env("LIBPMC_TRANSPORT", "sim")
            .env(var, value)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(69));
        assert!(
            stderr(&o).starts_with(&format!(
                "libpmc: simulated machine: {var}=\"{value}\" is not "
            )),
            "{}",
            stderr(&o)
        );
    }
}

/// Arguments are taken as the bytes they are (getopt(3) over OsString):
/// one that is not UTF-8 is refused with a message, never a panic.
#[test]
fn arguments_that_are_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let run = |args: &[&[u8]]| {
        Command::new(env!("CARGO_BIN_EXE_pmccontrol"))
            .args(args.iter().map(|a| OsStr::from_bytes(a)))
            .env("LIBPMC_TRANSPORT", "sim")
            .output()
            .unwrap()
    };
    for (args, code, msg) in [
        (
            &[&b"-c"[..], b"\xff"][..],
            65,
            "pmccontrol: \"\\xff\" is not a valid CPU id\n",
        ),
        (
            &[&b"-e\xfe1"[..]][..],
            65,
            "pmccontrol: \"\\xfe1\" is not a valid PMC id\n",
        ),
        (
            &[&b"-d"[..], b"7\xff"][..],
            65,
            "pmccontrol: \"7\\xff\" is not a valid PMC id\n",
        ),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), msg, "{args:?}");
    }
    let o = run(&[b"-\xe9"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("pmccontrol: Unrecognized option \"-\\xe9\"\npmccontrol: Usage:"),
        "{}",
        stderr(&o)
    );
    // A wildcard followed by anything is still the wildcard, as in C.
    let o = run(&[b"-c", b"*\xff", b"-e", b"0"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// pmccontrol against a ksimd daemon that several commands share.
fn on_daemon(socket: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmccontrol"))
        .args(args)
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_SOCKET", socket)
        .output()
        .expect("run pmccontrol")
}

/// The state of row `row` of `cpu` in `pmccontrol -l`'s listing.
fn row_state(listing: &str, cpu: u32, row: u32) -> String {
    let header = format!("#CPU {cpu}:");
    let mut lines = listing.lines().skip_while(|l| *l != header).skip(2);
    let line = lines
        .find(|l| l.split_whitespace().next() == Some(&row.to_string()))
        .unwrap_or_else(|| panic!("row {row} of CPU {cpu} in:\n{listing}"));
    line.split_whitespace().nth(3).unwrap().to_string()
}

/// -l names a PMC's event as FreeBSD's pmccontrol does, with
/// pmc_name_of_event: libpmc's table name for the TSC, and printf's
/// "(null)" for an event of a PMU table, which the driver knows by its
/// index in the table.
#[test]
fn listing_names_events_as_freebsd() {
    let bin = ksimd::daemon::binary_beside(std::path::Path::new(env!("CARGO_BIN_EXE_pmccontrol")));
    let daemon = ksimd::daemon::Daemon::start(&bin, &["-c", "2", "-r", "0"]).unwrap();
    let sock = daemon.socket();
    let transport = pmc::libpmc_sim::SimTransport::connect(
        sock.to_str().unwrap().to_owned(),
        0,
        "listing".into(),
    )
    .unwrap();
    let lib = pmc::pmc::Pmc::init(Box::new(transport)).unwrap();
    let mode = uapi::pmc::PmcMode::Sc.raw();
    let tsc = lib.allocate("tsc-cycles", mode, 0, 1, 0).unwrap();
    let iap = lib.allocate("inst_retired.any_p", mode, 0, 0, 0).unwrap();
    let o = on_daemon(&sock, &["-l"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let listing = stdout(&o);
    let row_of = |cpu: u32, class: &str| -> String {
        let header = format!("#CPU {cpu}:");
        listing
            .lines()
            .skip_while(|l| *l != header)
            .skip(2)
            .take_while(|l| !l.starts_with('#'))
            .find(|l| l.split_whitespace().nth(2) == Some(class) && l.contains("(pid"))
            .unwrap_or_else(|| panic!("a {class} row in use on CPU {cpu}:\n{listing}"))
            .to_owned()
    };
    let tsc_row = row_of(1, "TSC");
    let iap_row = row_of(0, "IAP");
    // " (pid N)" then the name in 32 columns; no reload count for a
    // counting PMC.
    let name_field = |row: &str| row[row.find(')').unwrap() + 1..].to_owned();
    assert_eq!(
        name_field(&tsc_row),
        format!(" {:<32}", "cycles"),
        "{tsc_row:?}"
    );
    assert_eq!(
        name_field(&iap_row),
        format!(" {:<32}", "(null)"),
        "{iap_row:?}"
    );
    lib.release(tsc).unwrap();
    lib.release(iap).unwrap();
    drop(lib);
    assert!(daemon.stop().success(), "ksimd's checks at its stop");
}

#[test]
fn commands_share_a_daemons_machine() {
    let bin = ksimd::daemon::binary_beside(std::path::Path::new(env!("CARGO_BIN_EXE_pmccontrol")));
    // Open to every user (-m 666), for the unprivileged command below.
    let daemon = ksimd::daemon::Daemon::start(&bin, &["-c", "2", "-r", "0", "-m", "666"]).unwrap();
    let sock = daemon.socket();
    // One command disables row 0 on CPU 1; the next sees it so.
    let o = on_daemon(&sock, &["-c", "1", "-d", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = on_daemon(&sock, &["-l"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(row_state(&stdout(&o), 1, 0), "DISABLED");
    assert_eq!(row_state(&stdout(&o), 0, 0), "ENABLED");
    let o = on_daemon(&sock, &["-c", "1", "-e", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = on_daemon(&sock, &["-l"]);
    assert_eq!(row_state(&stdout(&o), 1, 0), "ENABLED");
    // A private machine (no daemon) starts from scratch every time.
    let o = pmccontrol(&["-c", "1", "-d", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(row_state(&stdout(&pmccontrol(&["-l"])), 1, 0), "ENABLED");
    // An unprivileged user may not administer PMCs (PMC_OP_PMCADMIN needs
    // PRIV_PMC_MANAGE): EPERM, as on FreeBSD.
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid(2) has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test runs as root");
    let o = Command::new(env!("CARGO_BIN_EXE_pmccontrol"))
        .args(["-c", "1", "-d", "0"])
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_SOCKET", &sock)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("Operation not permitted"),
        "{}",
        stderr(&o)
    );
    let o = on_daemon(&sock, &["-l"]);
    assert_eq!(row_state(&stdout(&o), 1, 0), "ENABLED");
    assert!(daemon.stop().success(), "ksimd's checks at its stop");
}

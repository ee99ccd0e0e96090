//! The pmc(3) programs of tests/c/workload, written as for FreeBSD and
//! compiled against pmc.h, on a simulated machine of their own that runs
//! one of ksim's real workload programs while they let time pass (one CPU,
//! `LIBPMC_SIM_WORKLOAD=sort:40`, one clock tick per call): their hardware
//! PMCs count what the workload executes. Every program prints "ok" last
//! and exits 0 when its checks hold.

mod common_c;

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use common_c::{compile_dir, run_program};

#[test]
fn c_programs_on_a_machine_running_a_workload() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_workload");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let programs = compile_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/workload"),
        &out,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!programs.is_empty(), "no programs in tests/c/workload");
    let env = [
        ("LIBPMC_SIM_CPUS", OsStr::new("1")),
        ("LIBPMC_SIM_WORKLOAD", OsStr::new("sort:40")),
        ("LIBPMC_SIM_TICKS_PER_CALL", OsStr::new("1")),
    ];
    let failures: Vec<String> = programs
        .iter()
        .filter_map(|(name, exe)| run_program(name, name, exe, &env, &out, Duration::from_secs(60)))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

//! The pmc(3) programs of tests/c/workload, written as for FreeBSD and
//! compiled against pmc.h, on a simulated machine of their own that runs
//! one of ksim's real workload programs while they let time pass (one CPU,
//! `LIBPMC_SIM_WORKLOAD=sort:40`, one clock tick per call): their hardware
//! PMCs count what the workload executes. Every program prints "ok" last
//! and exits 0 when its checks hold.

mod common_c;

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use common_c::{clean_command, compile_dir, describe, kill_group, wait_for};

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
    let mut failures = Vec::new();
    for (name, exe) in &programs {
        let out_path = out.join(format!("{name}.stdout"));
        let err_path = out.join(format!("{name}.stderr"));
        let mut cmd = clean_command(exe);
        cmd.env("LIBPMC_TRANSPORT", "sim")
            .env("LIBPMC_SIM_CPUS", "1")
            .env("LIBPMC_SIM_WORKLOAD", "sort:40")
            .env("LIBPMC_SIM_TICKS_PER_CALL", "1")
            .stdin(std::process::Stdio::null())
            .stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap())
            .process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("run {name}: {e}"));
        let limit = Duration::from_secs(60);
        let status = wait_for(&mut child, limit);
        kill_group(child.id());
        if status.is_none() {
            let _ = child.wait();
        }
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        if !(status.is_some_and(|s| s.success()) && stdout.ends_with("ok\n")) {
            failures.push(format!(
                "{name}: {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
                describe(status, limit)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

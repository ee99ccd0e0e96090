//! The pmc(3) programs of tests/c/ksimd, written as for FreeBSD (own
//! pids, fork, unprivileged children, descendants, logs on pipes, sockets
//! and failing files), compiled with the host's C compiler against pmc.h
//! and linked with libpmc.a, then run on the simulator transport in both
//! of its modes: the private machine libpmc starts inside the process
//! (no LIBPMC_SIM_SOCKET), and a ksimd daemon (LIBPMC_SIM_SOCKET).
//! Every program prints "ok" last and exits 0 when its checks hold.

mod common_c;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use common_c::{Daemon, compile_dir, ksimd_binary, run_program};

/// How long a program may take; each arms alarm(30), so this is only a
/// backstop.
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the programs and their outputs go.
fn out_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_ksimd")
}

/// Every tests/c/ksimd/*.c, compiled once for both tests: the name and
/// executable of each, or what the compiler said.
fn programs() -> &'static [(String, PathBuf)] {
    static PROGRAMS: OnceLock<Result<Vec<(String, PathBuf)>, String>> = OnceLock::new();
    match PROGRAMS.get_or_init(|| {
        compile_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/ksimd"),
            &out_dir(),
        )
    }) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// Runs every program with the simulator transport, `socket` naming the
/// daemon's socket or None for the in-process machine; the failures, one
/// text each.
fn run_all(mode: &str, socket: Option<&Path>) -> Vec<String> {
    let dir = out_dir().join(mode);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut env = vec![("LIBPMC_SIM_TICKS_PER_CALL", OsStr::new("1"))];
    if let Some(s) = socket {
        env.push(("LIBPMC_SIM_SOCKET", s.as_os_str()));
    }
    let mut failures = Vec::new();
    for (name, exe) in programs() {
        let label = format!("{name} ({mode})");
        failures.extend(run_program(name, &label, exe, &env, &dir, PROGRAM_TIMEOUT));
    }
    failures
}

fn report(mode: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} failure(s) of the ksimd C programs ({mode}):\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn ksimd_c_programs_on_the_private_machine() {
    let failures = run_all("private", None);
    report("private machine in the process", &failures);
}

#[test]
fn ksimd_c_programs_against_the_daemon() {
    ksimd_binary();
    // Compiled before the daemon starts, so that its wait is short.
    programs();
    let logs = out_dir().join("ksimd");
    let _ = std::fs::remove_dir_all(&logs);
    // Short (a socket path has a limit) and reachable by the programs'
    // unprivileged children.
    let dir = std::env::temp_dir().join(format!("c_ksimd-{}", std::process::id()));
    let daemon = Daemon::start(&dir, "0666", &logs);

    let mut failures = run_all("daemon", Some(&daemon.socket));

    // The daemon exits 0 on SIGTERM unless its witness saw a violation or
    // kernel memory leaked.
    if let Err(e) = daemon.stop() {
        failures.push(e);
    }
    report("ksimd daemon", &failures);
}

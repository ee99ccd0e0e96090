//! Process control on this machine: the command waits before its exec
//! until it is started, a failed exec is reported at the start, an
//! interrupted command ends, and the process table lists this process.

use std::time::{Duration, Instant};

use libpmcstat::{CreateError, HostProcesses, ProcessControl, StartError};

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// Waits (up to a minute, for a loaded machine) for `pid` to exit.
fn reaped(procs: &HostProcesses, pid: i32) -> bool {
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        if procs.exited(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn a_command_runs_only_once_started() {
    let dir = std::env::temp_dir().join(format!("libpmcstat-held-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("ran");
    let _ = std::fs::remove_file(&marker);
    let procs = HostProcesses::new();
    let script = format!("echo ran > '{}'", marker.display());
    let pid = procs.create_process(&argv(&["sh", "-c", &script])).unwrap();
    assert!(pid > 0);
    // Held before its exec: nothing runs however long we wait.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!marker.exists(), "the command ran before it was started");
    assert!(!procs.exited(pid));
    procs.start_process(pid).unwrap();
    assert!(reaped(&procs, pid));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
    // Started once: a second start finds no held process.
    assert_eq!(
        procs.start_process(pid),
        Err(StartError::Token(libc::ESRCH))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_exec_is_reported_when_the_command_starts() {
    let procs = HostProcesses::new();
    let pid = procs
        .create_process(&argv(&["/nonexistent/libpmcstat-command"]))
        .unwrap();
    let e = procs.start_process(pid).unwrap_err();
    assert_eq!(e, StartError::Exec(libc::ENOENT));
    assert_eq!(
        e.message("/nonexistent/libpmcstat-command"),
        "ERROR: execvp \"/nonexistent/libpmcstat-command\" failed"
    );
    assert!(reaped(&procs, pid));
}

#[test]
fn an_interrupted_command_ends() {
    // The command inherits SIGINT's disposition, as FreeBSD's pmcstat's
    // does: a test run started where SIGINT is ignored (a shell's
    // background job without job control) must not pass that on.
    // SAFETY: SIG_DFL for SIGINT; no handler runs.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    let procs = HostProcesses::new();
    let pid = procs.create_process(&argv(&["sleep", "600"])).unwrap();
    procs.start_process(pid).unwrap();
    assert!(!procs.exited(pid));
    procs.kill_process(pid).unwrap();
    assert!(reaped(&procs, pid), "sleep 600 did not end on SIGINT");
}

#[test]
fn an_empty_or_unrepresentable_command_is_refused() {
    let procs = HostProcesses::new();
    assert_eq!(
        procs.create_process(&[]),
        Err(CreateError::Exec(libc::EINVAL))
    );
    assert_eq!(
        procs.create_process(&argv(&["a\0b"])),
        Err(CreateError::Exec(libc::EINVAL))
    );
}

#[test]
fn the_process_table_has_this_process() {
    let procs = HostProcesses::new();
    let table = procs.processes().unwrap();
    let me = std::process::id() as i32;
    let (_, name) = table
        .iter()
        .find(|(pid, _)| *pid == me)
        .expect("this process is listed");
    assert!(!name.is_empty());
}

//! The pmc(3) programs of tests/c/ksimd, written as for FreeBSD (own
//! pids, fork, unprivileged children, descendants, logs on pipes, sockets
//! and failing files), compiled with the host's C compiler against pmc.h
//! and linked with libpmc.a, then run on the simulator transport in both
//! of its modes: the private machine libpmc starts inside the process
//! (no LIBPMC_SIM_SOCKET), and a ksimd daemon (LIBPMC_SIM_SOCKET).
//! Every program prints "ok" last and exits 0 when its checks hold.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a program may take; each arms alarm(30), so this is only a
/// backstop.
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the daemon may take to make its socket, and to exit.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(10);

/// The libpmc.a built with this test: cargo builds the library's
/// static archive beside the test binary (target/<profile>/deps, named
/// with or without a hash) without always copying it up, so take the
/// newest archive of either place (as tests/c_program.rs does).
fn static_library() -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let mut candidates: Vec<PathBuf> = std::fs::read_dir(&deps)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name == "libpmc.a" || (name.starts_with("libpmc-") && name.ends_with(".a"))
        })
        .collect();
    candidates.push(deps.parent().unwrap().join("libpmc.a"));
    candidates
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .expect("libpmc.a was built")
}

/// Where the programs and their outputs go.
fn out_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_ksimd")
}

/// Every tests/c/ksimd/*.c, compiled once for both tests: the name and
/// executable of each, or what the compiler said.
fn programs() -> &'static [(String, PathBuf)] {
    static PROGRAMS: OnceLock<Result<Vec<(String, PathBuf)>, String>> = OnceLock::new();
    match PROGRAMS.get_or_init(compile_all) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

fn compile_all() -> Result<Vec<(String, PathBuf)>, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = manifest.join("tests/c/ksimd");
    let lib = static_library();
    let out = out_dir();
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&src)
        .map_err(|e| format!("{}: {e}", src.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    if sources.is_empty() {
        return Err(format!("no programs in {}", src.display()));
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut programs = Vec::new();
    let mut errors = String::new();
    for source in &sources {
        let name = source.file_stem().unwrap().to_string_lossy().into_owned();
        let exe = out.join(&name);
        let build = Command::new(&cc)
            // POSIX and BSD interfaces (fork, setgroups, ...) are
            // visible by default on FreeBSD; glibc wants them asked for.
            .args(["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg("-I")
            .arg(manifest)
            .arg("-I")
            .arg(manifest.join("host-include"))
            .arg(source)
            .arg(&lib)
            .args(["-lpthread", "-ldl", "-lm"])
            .output()
            .map_err(|e| format!("run the C compiler {cc}: {e}"))?;
        if build.status.success() {
            programs.push((name, exe));
        } else {
            errors += &format!(
                "cc failed for {}:\n{}\n",
                source.display(),
                String::from_utf8_lossy(&build.stderr)
            );
        }
    }
    if errors.is_empty() {
        Ok(programs)
    } else {
        Err(errors)
    }
}

/// A command with none of the caller's libpmc settings (a workload or
/// kernel environment would change what the programs see).
fn clean_command(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LIBPMC_") {
            cmd.env_remove(&name);
        }
    }
    cmd
}

/// Kills what is left of process group `pgid` (a program's children that
/// outlived it).
fn kill_group(pgid: u32) {
    // SAFETY: kill(2) of a process group this test created.
    unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
}

/// Waits for `child` for at most `limit`; None when it is still running.
fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn describe(status: Option<ExitStatus>) -> String {
    match status {
        None => format!("still running after {PROGRAM_TIMEOUT:?} (killed)"),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (_, Some(sig)) => format!("killed by signal {sig}"),
            _ => format!("{s}"),
        },
    }
}

/// Runs every program with the simulator transport, `socket` naming the
/// daemon's socket or None for the in-process machine; the failures, one
/// text each.
fn run_all(mode: &str, socket: Option<&Path>) -> Vec<String> {
    let dir = out_dir().join(mode);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    for (name, exe) in programs() {
        // Files rather than pipes: a straggling child that keeps them
        // open cannot make the test wait.
        let out_path = dir.join(format!("{name}.stdout"));
        let err_path = dir.join(format!("{name}.stderr"));
        let mut cmd = clean_command(exe);
        cmd.env("LIBPMC_TRANSPORT", "sim")
            .env("LIBPMC_SIM_TICKS_PER_CALL", "1")
            .stdin(std::process::Stdio::null())
            .stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap())
            .process_group(0);
        if let Some(s) = socket {
            cmd.env("LIBPMC_SIM_SOCKET", s);
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("run {name}: {e}"));
        let status = wait_for(&mut child, PROGRAM_TIMEOUT);
        kill_group(child.id());
        if status.is_none() {
            let _ = child.wait();
        }
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let passed = status.is_some_and(|s| s.success()) && stdout.ends_with("ok\n");
        if !passed {
            failures.push(format!(
                "{name} ({mode}): {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
                describe(status)
            ));
        }
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

/// The ksimd binary: $KSIMD, else target/<profile>/ksimd beside this
/// test's deps directory.
fn ksimd_binary() -> PathBuf {
    let path = match std::env::var_os("KSIMD") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .unwrap()
            .parent()
            .and_then(Path::parent)
            .expect("the test binary is in target/<profile>/deps")
            .join("ksimd"),
    };
    assert!(
        path.is_file(),
        "{} does not exist: build the ksimd package first (cargo build -p ksimd, \
         with this test's profile), or set KSIMD to the daemon's path",
        path.display()
    );
    path
}

/// A running daemon, killed if the test ends without stopping it.
struct Daemon {
    child: Option<Child>,
    dir: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn ksimd_c_programs_against_the_daemon() {
    let ksimd = ksimd_binary();
    // Compiled before the daemon starts, so that its wait is short.
    programs();
    let logs = out_dir().join("ksimd");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).unwrap();
    // Short (a socket path has a limit) and reachable by the programs'
    // unprivileged children.
    let dir = std::env::temp_dir().join(format!("c_ksimd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.join("sock");
    let out_path = logs.join("ksimd.stdout");
    let err_path = logs.join("ksimd.stderr");
    let child = clean_command(&ksimd)
        .arg("-f")
        .arg("-s")
        .arg(&socket)
        .args(["-m", "0666", "-r", "0"])
        .stdin(std::process::Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", ksimd.display()));
    let mut daemon = Daemon {
        child: Some(child),
        dir: dir.clone(),
    };
    let daemon_output = || {
        format!(
            "--- ksimd stdout\n{}--- ksimd stderr\n{}",
            std::fs::read_to_string(&out_path).unwrap_or_default(),
            std::fs::read_to_string(&err_path).unwrap_or_default()
        )
    };

    let deadline = Instant::now() + DAEMON_TIMEOUT;
    loop {
        if std::fs::symlink_metadata(&socket).is_ok_and(|m| m.file_type().is_socket()) {
            break;
        }
        let child = daemon.child.as_mut().unwrap();
        if let Some(status) = child.try_wait().unwrap() {
            daemon.child = None;
            panic!(
                "ksimd exited before making {} ({status})\n{}",
                socket.display(),
                daemon_output()
            );
        }
        assert!(
            Instant::now() < deadline,
            "ksimd made no socket {} within {DAEMON_TIMEOUT:?}\n{}",
            socket.display(),
            daemon_output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut failures = run_all("daemon", Some(&socket));

    // The daemon exits 0 on SIGTERM unless its witness saw a violation or
    // kernel memory leaked.
    let mut child = daemon.child.take().unwrap();
    // SAFETY: kill(2) of the daemon this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = wait_for(&mut child, DAEMON_TIMEOUT);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    match status {
        Some(s) if s.success() => {}
        Some(s) => failures.push(format!(
            "ksimd after SIGTERM: {}\n{}",
            describe(Some(s)),
            daemon_output()
        )),
        None => failures.push(format!(
            "ksimd did not exit within {DAEMON_TIMEOUT:?} of SIGTERM (killed)\n{}",
            daemon_output()
        )),
    }
    drop(daemon);
    report("ksimd daemon", &failures);
}

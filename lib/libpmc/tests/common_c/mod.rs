//! What the tests of C programs share: the libpmc.a to link them with,
//! compiling pmc(3) programs against pmc.h, running them without the
//! caller's libpmc settings, and a ksimd daemon started in the
//! foreground and stopped with SIGTERM.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How long the daemon may take to make its socket, and to exit.
pub const DAEMON_TIMEOUT: Duration = Duration::from_secs(10);

/// The libpmc.a built with this test: cargo builds the library's
/// static archive beside the test binary (target/<profile>/deps, named
/// with or without a hash) without always copying it up, so take the
/// newest archive of either place.
pub fn static_library() -> PathBuf {
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

/// Compiles every `*.c` of `src` (a directory under the crate) into
/// `out`: the name and executable of each, or what the compiler said.
pub fn compile_dir(src: &Path, out: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = static_library();
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut sources: Vec<PathBuf> = std::fs::read_dir(src)
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
pub fn clean_command(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LIBPMC_") {
            cmd.env_remove(&name);
        }
    }
    cmd
}

/// Runs test program `exe` (`label` in messages) on the simulator
/// transport with the variables `env`, for at most `limit`, its output in
/// `dir`/`name`.stdout and .stderr (files rather than pipes: a straggling
/// child that keeps them open cannot make the test wait). None when it
/// exited 0 with "ok" last; else how it ended, with its output.
pub fn run_program(
    name: &str,
    label: &str,
    exe: &Path,
    env: &[(&str, &std::ffi::OsStr)],
    dir: &Path,
    limit: Duration,
) -> Option<String> {
    let out_path = dir.join(format!("{name}.stdout"));
    let err_path = dir.join(format!("{name}.stderr"));
    let mut cmd = clean_command(exe);
    cmd.env("LIBPMC_TRANSPORT", "sim")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("run {name}: {e}"));
    let status = wait_for(&mut child, limit);
    kill_group(child.id());
    if status.is_none() {
        let _ = child.wait();
    }
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let passed = status.is_some_and(|s| s.success()) && stdout.ends_with("ok\n");
    (!passed).then(|| {
        format!(
            "{label}: {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
            describe(status, limit)
        )
    })
}

/// Kills what is left of process group `pgid` (a program's children that
/// outlived it).
pub fn kill_group(pgid: u32) {
    // SAFETY: kill(2) of a process group this test created.
    unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
}

/// Waits for `child` for at most `limit`; None when it is still running.
pub fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
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

/// How a program ended; `limit` is what a program still running was
/// given.
pub fn describe(status: Option<ExitStatus>, limit: Duration) -> String {
    match status {
        None => format!("still running after {limit:?} (killed)"),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit status {code}"),
            (_, Some(sig)) => format!("killed by signal {sig}"),
            _ => format!("{s}"),
        },
    }
}

/// The ksimd binary: $KSIMD, else target/<profile>/ksimd beside this
/// test's deps directory.
pub fn ksimd_binary() -> PathBuf {
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
pub struct Daemon {
    child: Option<Child>,
    /// The directory of its socket, removed with it.
    dir: PathBuf,
    /// Its socket.
    pub socket: PathBuf,
    out_path: PathBuf,
    err_path: PathBuf,
}

impl Daemon {
    /// Starts `ksimd -f -s DIR/sock -m MODE -r 0` with its socket in a new
    /// directory `dir` of mode 0755 (short, as a socket path has a limit,
    /// and reachable by unprivileged processes), its output in
    /// `logs/ksimd.stdout` and `logs/ksimd.stderr`, and waits for the
    /// socket.
    pub fn start(dir: &Path, mode: &str, logs: &Path) -> Daemon {
        let ksimd = ksimd_binary();
        std::fs::create_dir_all(logs).unwrap();
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.join("sock");
        let out_path = logs.join("ksimd.stdout");
        let err_path = logs.join("ksimd.stderr");
        let child = clean_command(&ksimd)
            .arg("-f")
            .arg("-s")
            .arg(&socket)
            .args(["-m", mode, "-r", "0"])
            .stdin(std::process::Stdio::null())
            .stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", ksimd.display()));
        let mut daemon = Daemon {
            child: Some(child),
            dir: dir.to_path_buf(),
            socket,
            out_path,
            err_path,
        };
        let deadline = Instant::now() + DAEMON_TIMEOUT;
        loop {
            if std::fs::symlink_metadata(&daemon.socket).is_ok_and(|m| m.file_type().is_socket()) {
                return daemon;
            }
            let child = daemon.child.as_mut().unwrap();
            if let Some(status) = child.try_wait().unwrap() {
                daemon.child = None;
                panic!(
                    "ksimd exited before making {} ({status})\n{}",
                    daemon.socket.display(),
                    daemon.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "ksimd made no socket {} within {DAEMON_TIMEOUT:?}\n{}",
                daemon.socket.display(),
                daemon.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's host pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the daemon said so far.
    pub fn output(&self) -> String {
        format!(
            "--- ksimd stdout\n{}--- ksimd stderr\n{}",
            std::fs::read_to_string(&self.out_path).unwrap_or_default(),
            std::fs::read_to_string(&self.err_path).unwrap_or_default()
        )
    }

    /// Whether the daemon has exited (it should not have, while a test
    /// uses it): its status, or None while it runs.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Sends SIGTERM and waits: the daemon exits 0 unless its witness saw
    /// a violation or kernel memory leaked. What went wrong otherwise.
    pub fn stop(mut self) -> Result<(), String> {
        let mut child = self.child.take().expect("the daemon runs");
        // SAFETY: kill(2) of the daemon this test started.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let status = wait_for(&mut child, DAEMON_TIMEOUT);
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => Err(format!(
                "ksimd after SIGTERM: {}\n{}",
                describe(Some(s), DAEMON_TIMEOUT),
                self.output()
            )),
            None => Err(format!(
                "ksimd did not exit within {DAEMON_TIMEOUT:?} of SIGTERM (killed)\n{}",
                self.output()
            )),
        }
    }
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

//! Running a ksimd daemon from a program or a test: start it on a socket
//! in a new directory, wait until it listens, stop it and learn whether
//! its checks at the stop held.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// A ksimd started by this process, killed if it is dropped unstopped.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    dir: PathBuf,
}

/// The ksimd program of the same build as the program `beside` (cargo
/// puts every binary of a workspace in one directory), or `$KSIMD`.
pub fn binary_beside(beside: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("KSIMD") {
        return PathBuf::from(p);
    }
    let dir = beside.parent().unwrap_or(Path::new("."));
    // A test binary sits in deps/ below the programs.
    let candidates = [dir.join("ksimd"), dir.join("../ksimd")];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| candidates[0].clone())
}

impl Daemon {
    /// Starts `binary` in the foreground on a socket in a new directory
    /// (mode 0755, so that other users can reach a socket opened with
    /// `-m`), with `args` besides, and waits (10 s at most) for its socket.
    pub fn start(binary: &Path, args: &[&str]) -> Result<Daemon, String> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ksimd-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
        }
        let sock = dir.join("sock");
        let child = Command::new(binary)
            .arg("-f")
            .arg("-s")
            .arg(&sock)
            .args(args)
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let mut d = Daemon {
            child: Some(child),
            dir,
        };
        let start = Instant::now();
        while !sock.exists() {
            if let Some(status) = d.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                d.child = None;
                return Err(format!("{} exited at start: {status}", binary.display()));
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err(format!("{} made no socket in 10 s", binary.display()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(d)
    }

    /// Its socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("sock")
    }

    /// Stops it (SIGTERM) and returns how it exited: 0 when the witness
    /// saw nothing and no kernel memory was left.
    pub fn stop(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        child.wait().expect("wait for ksimd")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

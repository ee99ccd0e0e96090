//! The ksimd program: its socket and its status over the protocol, its
//! stop and exit status, a second daemon on the same socket, a stale
//! socket, the background mode, and usage errors. (Being an integration
//! test of this package also makes cargo build the program, which the
//! tests of libpmc, pmccontrol and pmcstat start beside their own.)

// Host code, part of the simulator: the kernel allocation lints of
// sys/clippy.toml do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ksimd::daemon::Daemon;
use ksimd::proto::{Reply, Request};
use ksimd::sock;

const KSIMD: &str = env!("CARGO_BIN_EXE_ksimd");

fn ask(s: &OwnedFd, req: &Request) -> Reply {
    sock::send(s.as_raw_fd(), &req.encode(), None).unwrap();
    let p = sock::recv(s.as_raw_fd()).unwrap().expect("a reply");
    Reply::decode(&p.bytes).unwrap()
}

/// Whether a daemon answers a Status request at `path` within 200 ms.
fn answers(path: &Path) -> bool {
    let Ok(s) = sock::connect(path.to_str().unwrap()) else {
        return false;
    };
    let limit = libc::timeval {
        tv_sec: 0,
        tv_usec: 200_000,
    };
    // SAFETY: SO_RCVTIMEO takes a timeval, given with its size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const limit).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    sock::send(s.as_raw_fd(), &Request::Status.encode(), None).is_ok()
        && sock::recv(s.as_raw_fd())
            .ok()
            .flatten()
            .is_some_and(|p| matches!(Reply::decode(&p.bytes), Ok(Reply::Status(_))))
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ksimd-daemon-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn wait_gone(path: &Path) -> bool {
    let start = Instant::now();
    while path.exists() {
        if start.elapsed() > Duration::from_secs(10) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn a_daemon_serves_its_machine_and_stops_clean() {
    let d = Daemon::start(
        Path::new(KSIMD),
        &[
            "-c",
            "3",
            "-r",
            "0",
            "-m",
            "640",
            "-i",
            "GenuineIntel-6-3C-3",
        ],
    )
    .unwrap();
    let sock = d.socket();
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    let s = sock::connect(sock.to_str().unwrap()).unwrap();
    // Status before hello; then a hello makes this process a client under
    // its own pid.
    let Reply::Status(before) = ask(&s, &Request::Status) else {
        panic!("no status");
    };
    assert_eq!((before.clients, before.violations), (0, 0));
    let hello = Request::Hello {
        parent: 0,
        ticks_per_call: 0,
        comm: "daemon-test".into(),
        path: String::new(),
        image: 0,
    };
    assert_eq!(
        ask(&s, &hello),
        Reply::Welcome {
            pid: std::process::id(),
            hz: 1000
        }
    );
    assert_eq!(
        ask(
            &s,
            &Request::Sysctl {
                name: "kern.hwpmc.cpuid".into()
            }
        ),
        Reply::Text("GenuineIntel-6-3C-3".into())
    );
    let Reply::Status(after) = ask(&s, &Request::Status) else {
        panic!("no status");
    };
    assert_eq!(after.clients, 1);
    assert_eq!(after.processes, before.processes + 1);
    // Another daemon on the same socket is refused while this one serves.
    let o = Command::new(KSIMD)
        .args(["-f", "-s"])
        .arg(&sock)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("already serves"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    drop(s);
    assert!(d.stop().success());
    assert!(wait_gone(&sock), "the socket is removed at the stop");
}

#[test]
fn a_stale_socket_is_replaced_and_other_files_are_not() {
    let dir = tmpdir("stale");
    let path = dir.join("sock");
    // A socket nobody listens on any more.
    drop(sock::listen(path.to_str().unwrap(), 0o600).unwrap());
    let mut child = Command::new(KSIMD)
        .args(["-f", "-r", "0", "-s"])
        .arg(&path)
        .spawn()
        .unwrap();
    // Ready when it answers: a connection alone is no sign, since another
    // test's fork may hold the stale listener until its exec.
    let start = Instant::now();
    while !answers(&path) {
        assert!(start.elapsed() < Duration::from_secs(10), "no daemon");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    // A regular file in the way is left alone.
    std::fs::write(&path, b"not a socket").unwrap();
    let o = Command::new(KSIMD)
        .args(["-f", "-s"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a socket"));
    assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_f_it_returns_once_it_listens() {
    let dir = tmpdir("background");
    let path = dir.join("sock");
    // Its output goes nowhere: the daemon keeps what it was given.
    let status = Command::new(KSIMD)
        .args(["-r", "0", "-s"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    // The parent has returned: the daemon already answers.
    let s = sock::connect(path.to_str().unwrap()).unwrap();
    let Reply::Status(st) = ask(&s, &Request::Status) else {
        panic!("no status");
    };
    assert_eq!(st.clients, 0);
    drop(s);
    // Not our child: found by the socket on its command line.
    let me = path.to_string_lossy().into_owned();
    let pid = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&me))
        })
        .expect("the daemon's process");
    // SAFETY: kill(2) of the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert!(
        wait_gone(&path),
        "the daemon stopped and removed its socket"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_exit_64_naming_the_bad_value() {
    for (args, what) in [
        (&["-c", "300"][..], "-c \"300\""),
        (&["-r", "fast"][..], "-r \"fast\""),
        (&["-z"][..], "unknown option -z"),
    ] {
        let o = Command::new(KSIMD).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(64), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(what) && err.contains("usage: ksimd"), "{err}");
    }
}

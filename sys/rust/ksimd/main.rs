//! ksimd(8): the simulated machine as a daemon. See ksimd.8.

// Host code, part of the simulator: the kernel allocation lints of
// sys/clippy.toml do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;

use ksimd::server::{self, SimConfig, Workload};
use ksimd::sock;

const USAGE: &str = "usage: ksimd [-fv] [-c ncpu] [-F dir] [-i cpuid] [-k name=value] [-m mode] \
                     [-r rate] [-w workload] [-s socket]";

/// What the command line asked for.
#[derive(Debug)]
struct Options {
    foreground: bool,
    socket: String,
    mode: u32,
    cfg: SimConfig,
}

fn bad(what: &str) -> String {
    format!("ksimd: {what}\n{USAGE}")
}

/// getopt(3)-style parsing of `args` (the program's name excluded):
/// flags may be grouped, a value may follow its letter or be the next
/// word, and `--` ends the options. (libpmctool's getopt cannot serve:
/// it depends on libpmc, which depends on this crate.)
fn parse(args: &[OsString]) -> Result<Options, String> {
    // SAFETY: getuid(2) has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mut o = Options {
        foreground: false,
        socket: format!("/tmp/ksimd-{uid}.sock"),
        mode: 0o600,
        cfg: SimConfig {
            rate: 1.0,
            comm: String::new(),
            ..SimConfig::default()
        },
    };
    let mut i = 0;
    while i < args.len() {
        let word = args[i]
            .to_str()
            .ok_or_else(|| bad(&format!("argument {:?} is not text", args[i])))?;
        i += 1;
        if word == "--" {
            break;
        }
        let Some(letters) = word.strip_prefix('-').filter(|l| !l.is_empty()) else {
            return Err(bad(&format!("unexpected argument {word:?}")));
        };
        for (at, c) in letters.char_indices() {
            match c {
                'f' => o.foreground = true,
                'v' => o.cfg.verbose = true,
                'c' | 'F' | 'i' | 'k' | 'm' | 'r' | 's' | 'w' => {
                    let rest = &letters[at + c.len_utf8()..];
                    let value = if !rest.is_empty() {
                        rest.to_string()
                    } else {
                        let v = args
                            .get(i)
                            .ok_or_else(|| bad(&format!("option -{c} requires an argument")))?;
                        i += 1;
                        v.to_str()
                            .ok_or_else(|| bad(&format!("-{c} {v:?} is not text")))?
                            .to_string()
                    };
                    option(&mut o, c, &value)?;
                    break;
                }
                _ => return Err(bad(&format!("unknown option -{c}"))),
            }
        }
    }
    if i < args.len() {
        return Err(bad(&format!(
            "unexpected argument {:?}",
            args[i].to_string_lossy()
        )));
    }
    Ok(o)
}

fn option(o: &mut Options, c: char, v: &str) -> Result<(), String> {
    match c {
        'c' => {
            o.cfg.cpus = v
                .parse()
                .ok()
                .filter(|n| (1..=256).contains(n))
                .ok_or_else(|| bad(&format!("-c {v:?}: the CPUs are a number from 1 to 256")))?;
        }
        'F' => o.cfg.files_dir = Some(v.into()),
        'i' => o.cfg.cpuid = v.into(),
        'k' => match v.split_once('=') {
            Some((name, value)) if !name.is_empty() => {
                o.cfg.kenv.push((name.into(), value.into()));
            }
            _ => return Err(bad(&format!("-k {v:?}: a tunable is NAME=VALUE"))),
        },
        'm' => {
            o.mode = u32::from_str_radix(v, 8)
                .ok()
                .filter(|m| *m <= 0o777)
                .ok_or_else(|| bad(&format!("-m {v:?}: the socket's mode is octal, 0 to 0777")))?;
        }
        'r' => {
            o.cfg.rate = v
                .parse()
                .ok()
                .filter(|r: &f64| r.is_finite() && (0.0..=1000.0).contains(r))
                .ok_or_else(|| {
                    bad(&format!(
                        "-r {v:?}: the rate is simulated seconds per second, 0 to 1000"
                    ))
                })?;
        }
        's' => o.socket = v.into(),
        'w' => {
            o.cfg.workload = Some(Workload::parse(v).ok_or_else(|| {
                bad(&format!("-w {v:?}: the workload is {}", Workload::syntax()))
            })?);
        }
        _ => unreachable!("only the letters above take values"),
    }
    Ok(())
}

/// Removes a socket file left by a daemon that is gone; refuses to take
/// the place of one that answers.
fn clear_stale(path: &str) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(format!("ksimd: {path} exists and is not a socket"));
    }
    if sock::connect(path).is_ok() {
        return Err(format!("ksimd: a ksimd already serves {path}"));
    }
    std::fs::remove_file(path).map_err(|e| format!("ksimd: {path}: {e}"))
}

/// Blocks SIGTERM, SIGINT and SIGHUP in every thread (threads inherit
/// this mask) so that one thread takes them with sigwait.
fn stop_signals() -> libc::sigset_t {
    let mut set = core::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(set.as_mut_ptr(), s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), core::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        set.assume_init()
    }
}

fn run(o: Options, ready: Option<OwnedFd>) -> ExitCode {
    let signals = stop_signals();
    if let Err(e) = clear_stale(&o.socket) {
        eprintln!("{e}");
        return ExitCode::from(1);
    }
    let rate = o.cfg.rate;
    let handle = match server::boot(o.cfg) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("ksimd: {e}");
            return ExitCode::from(1);
        }
    };
    let listener = match sock::listen(&o.socket, o.mode) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ksimd: socket {}: {e}", o.socket);
            return ExitCode::from(1);
        }
    };
    server::start_clock(handle.clone(), server::clock_period(rate));
    let h = handle.clone();
    // An abstract name has no file permissions: only the daemon's user,
    // root and their clients' children may use it.
    let check_peer = o.socket.starts_with('@');
    std::thread::spawn(move || server::accept_loop(h, listener, check_peer));
    if let Some(fd) = ready {
        let mut f = std::fs::File::from(fd);
        let _ = f.write_all(b"ok");
    }
    let mut sig: libc::c_int = 0;
    // SAFETY: sigwait on the set blocked above; `sig` receives the signal.
    unsafe { libc::sigwait(&signals, &mut sig) };
    let _ = std::fs::remove_file(&o.socket);
    let Some(outcome) = handle.shutdown() else {
        eprintln!("ksimd: the machine was gone before it could stop");
        return ExitCode::from(1);
    };
    if outcome.clean() {
        return ExitCode::SUCCESS;
    }
    for v in &outcome.violations {
        eprintln!("ksimd: witness: {v}");
    }
    if outcome.leaked.0 > 0 {
        eprintln!(
            "ksimd: {} kernel allocations ({} bytes) leaked",
            outcome.leaked.0, outcome.leaked.1
        );
    }
    ExitCode::from(1)
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(64);
        }
    };
    if o.foreground {
        return run(o, None);
    }
    // In the background: the parent returns once the socket listens, with
    // the child's failure if it has one.
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } < 0 {
        eprintln!("ksimd: pipe: {}", std::io::Error::last_os_error());
        return ExitCode::from(1);
    }
    // SAFETY: pipe(2) made these two descriptors, each owned once here.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no thread has been started yet: the child is a copy of a
    // single-threaded process.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!("ksimd: fork: {}", std::io::Error::last_os_error());
            ExitCode::from(1)
        }
        0 => {
            drop(r);
            // SAFETY: setsid(2) in the new child, which leads no group.
            unsafe { libc::setsid() };
            if let Ok(null) = std::fs::OpenOptions::new().read(true).open("/dev/null") {
                // SAFETY: dup2 of an open descriptor onto standard input.
                unsafe { libc::dup2(null.as_raw_fd(), 0) };
            }
            run(o, Some(w))
        }
        _ => {
            drop(w);
            let mut answer = Vec::new();
            let _ = std::fs::File::from(r).read_to_end(&mut answer);
            if answer == b"ok" {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn options_as_getopt_reads_them() {
        let o = parse(&args(&[
            "-fv", "-c2", "-s", "/x/sock", "-m", "0666", "-r", "0",
        ]))
        .unwrap();
        assert!(o.foreground && o.cfg.verbose);
        assert_eq!(
            (o.cfg.cpus, o.socket.as_str(), o.mode),
            (2, "/x/sock", 0o666)
        );
        assert_eq!(o.cfg.rate, 0.0);
        let o = parse(&args(&["-k", "kern.hwpmc.nsamples=64", "-wwork:3"])).unwrap();
        assert_eq!(
            o.cfg.kenv,
            vec![("kern.hwpmc.nsamples".into(), "64".into())]
        );
        assert_eq!(o.cfg.workload, Some(Workload::Work { threads: 3 }));
    }

    #[test]
    fn bad_values_are_named() {
        for (a, what) in [
            (&["-c", "0"][..], "-c \"0\""),
            (&["-m", "0999"][..], "-m \"0999\""),
            (&["-r", "-1"][..], "-r \"-1\""),
            (&["-w", "nosuch"][..], "-w \"nosuch\""),
            (&["-k", "=1"][..], "-k \"=1\""),
            (&["-x"][..], "unknown option -x"),
            (&["-s"][..], "requires an argument"),
            (&["extra"][..], "unexpected argument"),
        ] {
            let e = parse(&args(a)).unwrap_err();
            assert!(e.contains(what), "{a:?}: {e}");
            assert!(e.contains("usage: ksimd"), "{e}");
        }
    }
}

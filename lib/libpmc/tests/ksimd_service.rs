//! ksimd as a service that must survive its clients: clients killed in
//! the middle of their work or leaving without releasing anything, 64
//! clients at once, malformed and truncated messages on the socket, and
//! the socket's permissions. Each test has a daemon of its own and ends
//! by stopping it with SIGTERM, which it must answer with exit status 0
//! (its witness saw no violation and no kernel memory was left when
//! hwpmc unloaded).
//!
//! The C programs are those of tests/c/ksimd-service, compiled against
//! pmc.h and linked with libpmc.a; the test's own view of the daemon is a
//! client of libpmc's simulator transport (the "probe"), or a raw stream
//! socket for the protocol tests.

mod common_c;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use common_c::{Daemon, clean_command, compile_dir, describe, kill_group, wait_for};
use ksimd::proto::{MAGIC, MAX_PACKET, Reply, Request, Status, VERSION};
use pmc::libpmc_sim::SimTransport;
use pmc::pmc::Pmc;
use uapi::pmc::{PmcClass, PmcDisp, PmcInfo, PmcOp};

/// FreeBSD's EPROTO: the daemon's answer to a packet it cannot read.
const EPROTO: i32 = 92;
/// How long a program may take (beyond what it is asked to run for).
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the daemon may take to notice a client gone: it learns it
/// from the end of the client's connection, and from a scan of the host's
/// processes every 100 ms.
const NOTICE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a reply on a raw socket may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// nobody's uid and gid.
const NOBODY: u32 = 65534;

/// One test at a time: the tests count the daemon's clients and
/// processes, and the host's pids they watch must be their own.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the programs and the outputs go.
fn out_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("ksimd_service")
}

/// The executable of tests/c/ksimd-service/`name`.c, all of them compiled
/// once.
fn program(name: &str) -> PathBuf {
    static PROGRAMS: OnceLock<Result<Vec<(String, PathBuf)>, String>> = OnceLock::new();
    let programs = match PROGRAMS.get_or_init(|| {
        compile_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/ksimd-service"),
            &out_dir().join("bin"),
        )
    }) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    programs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p.clone())
        .unwrap_or_else(|| panic!("no program {name} in tests/c/ksimd-service"))
}

/// A daemon of this test's own (`tag` names its directory and logs),
/// serving on a socket of mode `mode`.
fn daemon(tag: &str, mode: &str) -> Daemon {
    let dir = std::env::temp_dir().join(format!("ksimd_service-{}-{tag}", std::process::id()));
    let logs = out_dir().join(tag);
    let _ = std::fs::remove_dir_all(&logs);
    Daemon::start(&dir, mode, &logs)
}

/// A C program's command against the daemon at `socket`, one clock tick
/// before each of its calls.
fn client(exe: &Path, socket: &Path) -> Command {
    let mut cmd = clean_command(exe);
    cmd.env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_SOCKET", socket)
        .env("LIBPMC_SIM_TICKS_PER_CALL", "1")
        .stdin(Stdio::null())
        .process_group(0);
    cmd
}

/// The test's own client of the daemon, as pmc_init() would make it.
fn probe(d: &Daemon) -> Pmc {
    let socket = d.socket.to_str().expect("a text path").to_string();
    let t = SimTransport::connect(socket, 0, "probe".into())
        .unwrap_or_else(|e| panic!("connect to the daemon: errno {e}\n{}", d.output()));
    Pmc::init(Box::new(t)).unwrap_or_else(|e| panic!("pmc init: errno {e}\n{}", d.output()))
}

fn status(p: &Pmc) -> Status {
    p.transport()
        .simulator()
        .expect("the simulator transport")
        .status()
        .unwrap_or_else(|e| panic!("the daemon's status: errno {e}"))
}

/// Every row of every CPU, as pmc_pmcinfo() gives them.
fn rows(p: &Pmc) -> Vec<(i32, usize, PmcInfo)> {
    let mut all = Vec::new();
    for cpu in 0..p.cpuinfo().pm_ncpu as i32 {
        let info = p
            .pmcinfo(cpu)
            .unwrap_or_else(|e| panic!("pmcinfo of CPU {cpu}: errno {e}"));
        all.extend(info.into_iter().enumerate().map(|(ri, i)| (cpu, ri, i)));
    }
    all
}

/// The rows that are not free (an owner, or a disposition other than
/// FREE), as text.
fn busy_rows(p: &Pmc) -> Vec<String> {
    rows(p)
        .into_iter()
        .filter(|(_, _, i)| i.pm_ownerpid != -1 || i.pm_rowdisp != PmcDisp::Free.raw())
        .map(|(cpu, ri, i)| {
            format!(
                "CPU {cpu} row {ri} ({}): owner {} disposition {} mode {}",
                String::from_utf8_lossy(uapi::pmc::c_field_str(&i.pm_name)),
                i.pm_ownerpid,
                i.pm_rowdisp,
                i.pm_mode
            )
        })
        .collect()
}

/// Waits (at most [`NOTICE_TIMEOUT`]) until the daemon has as many
/// clients and processes as `base` and every row is free again; what was
/// still there otherwise.
fn settle(p: &Pmc, base: &Status) -> Result<Status, String> {
    let deadline = Instant::now() + NOTICE_TIMEOUT;
    loop {
        let s = status(p);
        let busy = busy_rows(p);
        if s.clients == base.clients && s.processes == base.processes && busy.is_empty() {
            return Ok(s);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "after {NOTICE_TIMEOUT:?}: {s:?} (before: {base:?}); rows not free: {busy:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The lines a child writes on its standard output (a pipe), as they
/// come.
fn lines_of(out: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// 1. A client killed (SIGKILL) while it holds a system-mode PMC, a
///    process PMC and a log on a pipe (once more with the log's writer
///    blocked on the full pipe, and once with that pipe's reader alive a
///    while after its owner), and a client that exits without
///    releasing any of it (each twice), leave nothing behind: their rows
///    are free again, the daemon's clients and processes are back to what
///    they were, its kernel memory does not grow from one client to the
///    next and its witness saw no violation; the daemon then exits 0 on
///    SIGTERM (nothing leaked).
#[test]
fn a_client_that_dies_or_leaves_leaves_nothing_behind() {
    let _serial = serial();
    let exe = program("crash_client");
    let d = daemon("crash", "600");
    let p = probe(&d);
    let base = status(&p);
    assert_eq!(base.clients, 1, "only the probe is connected: {base:?}");
    assert_eq!(busy_rows(&p), Vec::<String>::new(), "rows in use at first");
    let tsc = PmcClass::Tsc.raw();
    // Kernel memory after the first client: the driver keeps some of what
    // its first owner made it allocate for reuse; each later client must
    // leave it as it was (no growth from one client to the next).
    let mut kmem_after_first = None;

    for how in ["block", "exit", "full", "held", "block", "exit"] {
        let err_path = out_dir().join(format!("crash_client-{how}.stderr"));
        let mut child = client(&exe, &d.socket)
            .arg(how)
            .stdout(Stdio::piped())
            .stderr(File::create(&err_path).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()));
        let pid = child.id();
        let lines = lines_of(child.stdout.take().unwrap());
        let stderr = || std::fs::read_to_string(&err_path).unwrap_or_default();
        let ready = lines.recv_timeout(PROGRAM_TIMEOUT);
        // "ready PID", and for "held" the reader's pid after it.
        let reader = match ready.as_deref().map(|l| l.split(' ').collect::<Vec<_>>()) {
            Ok(w) if how != "held" && w == ["ready", &pid.to_string()] => Some(None),
            Ok(w)
                if how == "held"
                    && w.len() == 4
                    && w[..3] == ["ready", &pid.to_string(), "reader"] =>
            {
                w[3].parse::<libc::pid_t>()
                    .ok()
                    .filter(|&r| r > 0)
                    .map(Some)
            }
            _ => None,
        };
        let Some(reader) = reader else {
            let _ = child.kill();
            let status = child.wait().ok();
            panic!(
                "crash_client {how} did not say it was ready ({ready:?}, {})\n--- stderr\n{}\n{}",
                describe(status, PROGRAM_TIMEOUT),
                stderr(),
                d.output()
            );
        };

        if how != "exit" {
            // What it holds, as another client sees it: its TSC row on
            // CPU 0, its process PMC's row given to threads.
            let held = rows(&p);
            let (_, _, row) = held
                .iter()
                .find(|(cpu, _, i)| *cpu == 0 && i.pm_class == tsc)
                .expect("CPU 0 has a TSC row");
            assert_eq!(
                (row.pm_ownerpid, row.pm_rowdisp),
                (pid as i32, PmcDisp::Standalone.raw()),
                "CPU 0's TSC row while crash_client (pid {pid}) holds it: {row:?}"
            );
            assert!(
                held.iter()
                    .any(|(_, _, i)| i.pm_class == PmcClass::Soft.raw()
                        && i.pm_rowdisp == PmcDisp::Thread.raw()),
                "no SOFT row is given to thread-virtual PMCs: {:?}",
                busy_rows(&p)
            );
            // One more client, and two more processes: the client's, and
            // the kernel process that writes its log (hwpmc has one for
            // each owner with a log, as FreeBSD's); "held" has forked a
            // child, which the machine mirrors at its next look for the
            // children of processes that PMCs follow (every 100 ms).
            let want = (
                base.clients + 1,
                base.processes + 2 + u32::from(how == "held"),
            );
            let start = Instant::now();
            let mut s = status(&p);
            while (s.clients, s.processes) != want && start.elapsed() < NOTICE_TIMEOUT {
                std::thread::sleep(Duration::from_millis(20));
                s = status(&p);
            }
            assert_eq!(
                (s.clients, s.processes),
                want,
                "with crash_client connected: {s:?}, before: {base:?}; processes {:?}",
                p.transport().simulator().unwrap().processes()
            );
            // SAFETY: kill(2) of the child this test started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            let status = wait_for(&mut child, PROGRAM_TIMEOUT);
            assert!(
                status.is_some_and(|s| !s.success()),
                "crash_client after SIGKILL: {}",
                describe(status, PROGRAM_TIMEOUT)
            );
            if let Some(reader) = reader {
                // The dead owner's log cannot drain while the reader
                // lives (FreeBSD's exiting owner waits for its log's
                // writer, under hwpmc's lock); it may not be left so.
                std::thread::sleep(Duration::from_secs(1));
                // SAFETY: kill(2) of the reader crash_client forked.
                unsafe { libc::kill(reader, libc::SIGKILL) };
            }
        } else {
            let status = wait_for(&mut child, PROGRAM_TIMEOUT);
            let rest: Vec<String> = lines.iter().collect();
            assert!(
                status.is_some_and(|s| s.success()) && rest == ["ok"],
                "crash_client exit: {}\n--- stdout after ready\n{rest:?}\n--- stderr\n{}",
                describe(status, PROGRAM_TIMEOUT),
                stderr()
            );
        }
        kill_group(pid);
        let _ = child.wait();

        let after = settle(&p, &base).unwrap_or_else(|e| {
            panic!(
                "crash_client {how} (pid {pid}) left something behind: {e}\n{}",
                d.output()
            )
        });
        assert_eq!(after.violations, 0, "witness violations: {after:?}");
        let first = *kmem_after_first.get_or_insert(after.kmem_live);
        assert_eq!(
            after.kmem_live, first,
            "kernel allocations live after crash_client {how}, and after the first client"
        );
    }
    drop(p);
    d.stop().unwrap_or_else(|e| panic!("{e}"));
}

/// Sums of what the hammers said they did.
#[derive(Debug, Default)]
struct Hammered {
    iterations: u64,
    calls: u64,
    tsc: u64,
    ebusy: u64,
    counted: u64,
}

/// Reads a hammer's "calls C tsc T ebusy B counted V" and "ok N" into
/// `sum`.
fn parse_hammer(stdout: &str, sum: &mut Hammered) -> Result<(), String> {
    let lines: Vec<&str> = stdout.lines().collect();
    let [what, ok] = lines[..] else {
        return Err(format!("not two lines: {stdout:?}"));
    };
    let words: Vec<&str> = what.split(' ').collect();
    let number = |s: &str| s.parse::<u64>().map_err(|e| format!("{s:?}: {e}"));
    match (&words[..], ok.strip_prefix("ok ")) {
        (["calls", c, "tsc", t, "ebusy", b, "counted", v], Some(n)) => {
            sum.calls += number(c)?;
            sum.tsc += number(t)?;
            sum.ebusy += number(b)?;
            sum.counted += number(v)?;
            sum.iterations += number(n)?;
            Ok(())
        }
        _ => Err(format!("unexpected output {stdout:?}")),
    }
}

/// 2. 64 clients at once, each for KSIMD_STRESS_SECONDS seconds (5 by
///    default, to keep CI short; `KSIMD_STRESS_SECONDS=60` is the
///    minute-long run), allocating, attaching, starting, reading,
///    stopping and releasing process PMCs, with system-mode TSC PMCs on
///    random CPUs now and then (which FreeBSD lets owners share; EBUSY
///    would be an answer, counted, were a row another owner holds
///    refused): every one exits 0 with "ok", the driver's counters agree
///    with what the clients did, nothing is left, the daemon's witness
///    saw nothing and the daemon exits 0 on SIGTERM.
#[test]
fn sixty_four_clients_hammering_one_daemon() {
    const CLIENTS: usize = 64;
    let _serial = serial();
    let seconds: u64 = match std::env::var("KSIMD_STRESS_SECONDS") {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("KSIMD_STRESS_SECONDS={v:?} is not a number of seconds")),
        Err(_) => 5,
    };
    let exe = program("hammer");
    let d = daemon("hammer", "600");
    let base = {
        let p = probe(&d);
        status(&p)
    };
    let dir = out_dir().join("hammer");
    let mut children = Vec::new();
    for i in 0..CLIENTS {
        let out_path = dir.join(format!("hammer-{i}.stdout"));
        let err_path = dir.join(format!("hammer-{i}.stderr"));
        let child = client(&exe, &d.socket)
            .arg(seconds.to_string())
            .stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()));
        children.push((child, out_path, err_path));
    }
    let deadline = Instant::now() + Duration::from_secs(seconds) + PROGRAM_TIMEOUT * 2;
    let mut failures = Vec::new();
    let mut sum = Hammered::default();
    for (i, (mut child, out_path, err_path)) in children.into_iter().enumerate() {
        let status = wait_for(
            &mut child,
            deadline.saturating_duration_since(Instant::now()),
        );
        kill_group(child.id());
        if status.is_none() {
            let _ = child.wait();
        }
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let parsed = parse_hammer(&stdout, &mut sum);
        if !status.is_some_and(|s| s.success()) || parsed.is_err() {
            failures.push(format!(
                "hammer {i}: {} ({parsed:?})\n--- stdout\n{stdout}--- stderr\n{stderr}",
                describe(status, PROGRAM_TIMEOUT * 2)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {CLIENTS} hammers failed:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        d.output()
    );
    eprintln!("{CLIENTS} hammers for {seconds} s: {sum:?}");

    let p = probe(&d);
    let after = settle(&p, &base)
        .unwrap_or_else(|e| panic!("the hammers left something behind: {e}\n{}", d.output()));
    assert_eq!(after.violations, 0, "witness violations: {after:?}");
    let st = p.driver_stats().expect("pmc_get_driver_stats");
    eprintln!("driver stats: {st:?}");
    // The driver's counters are 32 bits: the sums below must fit for the
    // comparisons to mean anything.
    assert!(sum.calls < u64::from(u32::MAX), "{sum:?}");
    // The system-mode path ran (one iteration in eight takes it).
    assert!(sum.tsc > 0, "no hammer used a system-mode PMC: {sum:?}");
    let syscalls = u64::from(st.pm_syscalls);
    let errors = u64::from(st.pm_syscall_errors);
    // Each pmc(3) call a hammer counted is at least one system call of
    // the driver (the probes and pmc_init() add theirs).
    assert!(syscalls >= sum.calls, "{st:?} for {sum:?}");
    // Every call of the hammers but the EBUSY answers they counted
    // succeeded (each checks), as did every call of the probes and of
    // pmc_init(): the failed system calls are those EBUSY answers.
    assert_eq!(errors, sum.ebusy, "{st:?} for {sum:?}");
    assert!(errors <= syscalls, "{st:?}");
    // Only counting PMCs ever existed on this machine: none took a
    // sample, so no sample was lost to a full ring.
    assert_eq!(st.pm_intr_bufferfull, 0, "{st:?}");
    // Every tick a hammer's SOFT-CLOCK.HARD PMC counted was a soft clock
    // interrupt hwpmc handled (processed, not ignored): only the calling
    // client's thread runs on CPU 0 during its call, so no two hammers'
    // counts share one interrupt.
    assert!(
        u64::from(st.pm_intr_processed) >= sum.counted,
        "{st:?} for {sum:?}"
    );
    // No client configured a log: no log buffer was asked for, so none
    // could be refused.
    assert_eq!(
        (st.pm_buffer_requests, st.pm_buffer_requests_failed),
        (0, 0),
        "{st:?}"
    );
    drop(p);
    d.stop().unwrap_or_else(|e| panic!("{e}"));
}

/// A raw connection to the daemon, with reads that time out.
fn raw(d: &Daemon) -> UnixStream {
    let s = UnixStream::connect(&d.socket)
        .unwrap_or_else(|e| panic!("connect to {}: {e}", d.socket.display()));
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    s
}

/// `packet` with its length before it, as sock.rs frames it.
fn frame(packet: &[u8]) -> Vec<u8> {
    let mut v = (packet.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(packet);
    v
}

/// Reads one reply packet; None at the end of the stream before its
/// first byte.
fn read_reply(s: &mut UnixStream) -> Result<Option<Reply>, String> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match s.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(format!("the stream ended after {got} bytes of a length")),
            Ok(n) => got += n,
            Err(e) => return Err(format!("reading a reply: {e}")),
        }
    }
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_PACKET {
        return Err(format!("a reply of {n} bytes"));
    }
    let mut packet = vec![0u8; n];
    s.read_exact(&mut packet)
        .map_err(|e| format!("reading a reply of {n} bytes: {e}"))?;
    Reply::decode(&packet)
        .map(Some)
        .map_err(|e| format!("a reply that does not decode ({e}): {packet:?}"))
}

/// Sends `raw` and reads the reply.
fn ask(s: &mut UnixStream, raw: &[u8]) -> Result<Option<Reply>, String> {
    s.write_all(raw).map_err(|e| format!("send: {e}"))?;
    read_reply(s)
}

fn hello() -> Request {
    Request::Hello {
        parent: std::os::unix::process::parent_id(),
        ticks_per_call: 0,
        comm: "rawclient".into(),
        path: String::new(),
        image: 0,
    }
}

/// After each case, the daemon still serves a new client (the
/// equivalent of pmc_init()), and its witness saw nothing.
fn still_serving(d: &Daemon, after: &str) {
    let p = probe(d);
    let s = status(&p);
    assert_eq!(s.violations, 0, "after {after}: {s:?}");
    assert!(p.driver_stats().is_ok(), "after {after}");
}

/// 3. Malformed and truncated messages: each gets an error reply
///    (EPROTO) and the connection goes on serving (a Status request on it
///    is answered); a length beyond the protocol's largest packet gets
///    EPROTO and the connection's end; half a frame, then the end of the
///    stream, ends the connection without a reply. After every case a
///    new client is served, and in the end the daemon has no client left
///    but the probe, and exits 0 on SIGTERM.
#[test]
fn malformed_and_truncated_messages_are_refused() {
    let _serial = serial();
    let d = daemon("proto", "600");
    let base = {
        let p = probe(&d);
        status(&p)
    };

    let status_packet = Request::Status.encode();
    let with = |at: usize, bytes: &[u8]| {
        let mut p = status_packet.clone();
        p[at..at + bytes.len()].copy_from_slice(bytes);
        p
    };
    let hello_packet = hello().encode();
    let mut trailing = hello_packet.clone();
    trailing.push(0);
    let call = Request::Call {
        op: PmcOp::Getmoduleversion.raw(),
        arg: vec![0; 4],
        with_fd: false,
    }
    .encode();
    let mut garbage = b"GET / HTTP/1.1\r\nHost: ksimd\r\n\r\n".to_vec();
    garbage.extend_from_slice(&[0xff; 37]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage bytes with a valid length", garbage),
        ("an empty packet", Vec::new()),
        ("half a magic", MAGIC[..2].to_vec()),
        ("a wrong magic", with(0, b"KSIN")),
        ("a wrong version", with(4, &(VERSION + 1).to_le_bytes())),
        ("version 0", with(4, &0u16.to_le_bytes())),
        ("an unknown kind", with(6, &[0x7f])),
        ("a reply's kind", with(6, &[0x88])),
        ("a Call before Hello", call.clone()),
        (
            "a truncated Hello",
            hello_packet[..hello_packet.len() - 3].to_vec(),
        ),
        ("a Hello cut after its header", hello_packet[..7].to_vec()),
        ("a Hello with a byte after its end", trailing),
    ];
    for (what, packet) in &cases {
        let mut s = raw(&d);
        let r = ask(&mut s, &frame(packet));
        assert_eq!(
            r,
            Ok(Some(Reply::Error(EPROTO))),
            "{what}: {packet:?}\n{}",
            d.output()
        );
        // The connection stays, and is served.
        let r = ask(&mut s, &frame(&status_packet));
        assert!(
            matches!(r, Ok(Some(Reply::Status(_)))),
            "Status after {what}: {r:?}\n{}",
            d.output()
        );
        drop(s);
        still_serving(&d, what);
    }

    // A second Hello on a connection is refused; the first one stands.
    {
        let what = "a second Hello";
        let mut s = raw(&d);
        let r = ask(&mut s, &frame(&hello_packet));
        assert!(matches!(r, Ok(Some(Reply::Welcome { .. }))), "Hello: {r:?}");
        let r = ask(&mut s, &frame(&hello_packet));
        assert_eq!(r, Ok(Some(Reply::Error(EPROTO))), "{what}");
        let r = ask(&mut s, &frame(&call));
        assert!(
            matches!(r, Ok(Some(Reply::Called { errno: 0, .. }))),
            "a Call after {what}: {r:?}"
        );
        drop(s);
        still_serving(&d, what);
    }

    // A length larger than the protocol allows: EPROTO, and the end.
    for len in [MAX_PACKET as u32 + 1, u32::MAX] {
        let what = format!("a length of {len}");
        let mut s = raw(&d);
        let r = ask(&mut s, &len.to_le_bytes());
        assert_eq!(r, Ok(Some(Reply::Error(EPROTO))), "{what}\n{}", d.output());
        let r = read_reply(&mut s);
        assert_eq!(r, Ok(None), "after {what}, the connection ends");
        drop(s);
        still_serving(&d, &what);
    }

    // Half a frame, then the end of the stream: no reply, the end.
    for (what, bytes) in [
        ("half a frame", {
            let mut b = frame(&hello_packet);
            b.truncate(b.len() / 2);
            b
        }),
        ("half a length", vec![0x10, 0x00]),
    ] {
        let mut s = raw(&d);
        s.write_all(&bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let r = read_reply(&mut s);
        assert_eq!(r, Ok(None), "{what}, then the end of the stream");
        drop(s);
        still_serving(&d, what);
    }
    // Half a frame, then gone without waiting for anything.
    {
        let mut s = raw(&d);
        s.write_all(&frame(&status_packet)[..5]).unwrap();
        drop(s);
        still_serving(&d, "half a frame and a close");
    }

    let p = probe(&d);
    let after = settle(&p, &base)
        .unwrap_or_else(|e| panic!("raw clients left something behind: {e}\n{}", d.output()));
    assert_eq!(after.violations, 0, "witness violations: {after:?}");
    drop(p);
    d.stop().unwrap_or_else(|e| panic!("{e}"));
}

/// 4. The socket's mode decides who may use the daemon: with the default
///    mode 0600 a process of nobody (uid and gid 65534) cannot connect,
///    pmc_init() fails and libpmc names the socket and the permission
///    denied; at 0666 (in a 0755 directory) the same program works.
#[test]
fn the_socket_mode_decides_who_may_connect() {
    let _serial = serial();
    // SAFETY: geteuid(2) has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test runs a program as nobody ({NOBODY}) against a root daemon's socket, \
         and so must run as root; it runs as uid {euid}"
    );
    // A copy nobody can reach: the build's directories may not be.
    let bin = std::env::temp_dir().join(format!("ksimd_service-{}-bin", std::process::id()));
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::create_dir(&bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = bin.join("connect_check");
    std::fs::copy(program("connect_check"), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut failures = Vec::new();
    for (mode, allowed) in [("600", false), ("666", true)] {
        let tag = format!("mode{mode}");
        let d = daemon(&tag, mode);
        let file_mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            format!("{file_mode:o}"),
            mode,
            "the mode of {}",
            d.socket.display()
        );
        let out_path = out_dir().join(&tag).join("connect_check.stdout");
        let err_path = out_dir().join(&tag).join("connect_check.stderr");
        let mut child = client(&exe, &d.socket)
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir("/")
            .stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("run {} as nobody: {e}", exe.display()));
        let status = wait_for(&mut child, PROGRAM_TIMEOUT);
        kill_group(child.id());
        if status.is_none() {
            let _ = child.wait();
        }
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        let socket = d.socket.to_string_lossy().into_owned();
        let as_expected = if allowed {
            status.is_some_and(|s| s.success()) && stdout.ends_with("ok\n")
        } else {
            status.is_some_and(|s| s.code() == Some(2))
                && stderr.contains(&socket)
                && stderr.contains("Permission denied")
        };
        if !as_expected {
            failures.push(format!(
                "connect_check as nobody, socket mode {mode} ({}): {}\n--- stdout\n{stdout}\
                 --- stderr\n{stderr}{}",
                if allowed {
                    "should work"
                } else {
                    "should fail to connect, naming the socket and \"Permission denied\""
                },
                describe(status, PROGRAM_TIMEOUT),
                d.output()
            ));
        }
        if let Err(e) = d.stop() {
            failures.push(e);
        }
    }
    let _ = std::fs::remove_dir_all(&bin);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// exec(2) keeps the process: a child that a PMC follows execs a new
/// image; when that image calls pmc(3) the machine's process execs (the
/// same process, the same pid), and the owner's log has the PROCEXEC
/// record FreeBSD writes, with the new image's path. (A private machine
/// lives in its program, so only a daemon can see a program's exec.)
#[test]
fn an_exec_is_the_same_process_with_a_new_image() {
    let _one = serial();
    let d = daemon("exec", "600");
    let log = out_dir().join("exec").join("exec.log");
    let out_path = out_dir().join("exec").join("exec_child.out");
    let mut child = client(&program("exec_child"), &d.socket)
        .arg(&log)
        .stdout(File::create(&out_path).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let status = wait_for(&mut child, PROGRAM_TIMEOUT);
    kill_group(child.id());
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()) && stdout.ends_with("ok\n"),
        "exec_child: {}\n{stdout}\n{}",
        describe(status, PROGRAM_TIMEOUT),
        d.output()
    );
    d.stop().unwrap();
}

//! Writes one encoded packet of every request and reply kind into the
//! directory named by the first argument: the seed corpus of the `proto`
//! fuzz target (sys/rust/ksimd/fuzz, run by tools/fuzz).
//!
//! Usage: proto_seeds DIR

// Host code, part of the simulator: the kernel allocation lints of
// sys/clippy.toml do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use ksimd::proto::{Reply, Request, Status};

fn requests() -> Vec<(&'static str, Request)> {
    vec![
        (
            "hello",
            Request::Hello {
                parent: 4242,
                ticks_per_call: 1,
                comm: "pmcstat".into(),
                path: "/usr/sbin/pmcstat".into(),
                image: 0x0123_4567_89ab_cdef,
            },
        ),
        (
            "call",
            Request::Call {
                op: 11,
                arg: vec![3, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255],
                with_fd: true,
            },
        ),
        (
            "call-null",
            Request::Call {
                op: 0,
                arg: Vec::new(),
                with_fd: false,
            },
        ),
        (
            "sysctl",
            Request::Sysctl {
                name: "kern.hwpmc.cpuid".into(),
            },
        ),
        ("advance", Request::Advance { ticks: 1000 }),
        ("fork-held", Request::ForkHeld),
        (
            "run-work",
            Request::RunWork {
                pid: 100_001,
                threads: 4,
                ticks: 2000,
            },
        ),
        ("job-exited", Request::JobExited { pid: 100_001 }),
        (
            "kill",
            Request::Kill {
                pid: 100_001,
                held: true,
            },
        ),
        ("processes", Request::Processes),
        ("status", Request::Status),
    ]
}

fn replies() -> Vec<(&'static str, Reply)> {
    vec![
        ("error", Reply::Error(92)),
        ("done", Reply::Done),
        (
            "welcome",
            Reply::Welcome {
                pid: 4243,
                hz: 1000,
            },
        ),
        (
            "called",
            Reply::Called {
                errno: 22,
                arg: vec![0; 16],
                exterr: vec![1, 0, 0, 0, 22, 0, 0, 0],
            },
        ),
        ("text", Reply::Text("GenuineIntel-6-5E-3".into())),
        ("pid", Reply::Pid(100_002)),
        ("flag", Reply::Flag(false)),
        (
            "processes",
            Reply::Processes(vec![(1, "init".into()), (4243, "pmcstat".into())]),
        ),
        (
            "status",
            Reply::Status(Status {
                clients: 2,
                processes: 7,
                ticks: 123_456,
                violations: 0,
                kmem_live: 42,
            }),
        ),
    ]
}

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: proto_seeds DIR");
        std::process::exit(64);
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let packets = requests()
        .into_iter()
        .map(|(name, r)| (format!("request-{name}"), r.encode()))
        .chain(
            replies()
                .into_iter()
                .map(|(name, r)| (format!("reply-{name}"), r.encode())),
        );
    for (name, packet) in packets {
        let path = dir.join(name);
        std::fs::write(&path, packet).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

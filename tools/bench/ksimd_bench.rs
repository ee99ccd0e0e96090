//! ksimd-bench: the cost of a request through ksimd's protocol, a
//! PMC_OP_GETDRIVERSTATS system call of the simulated machine answered
//! over the socket, on a machine private to this process and on a ksimd
//! daemon (the ksimd program beside this one), from one client and from
//! several at once. Prints requests per second and microseconds per
//! request, the median of five runs.
//!
//!     ksimd-bench [REQUESTS]      (default 20000 per client and run)

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

use ksimd::proto::{Reply, Request};
use ksimd::server::{self, SimConfig};
use ksimd::sock;
use uapi::pmc::{PmcOp, PmcOpGetdriverstats};

fn exchange(s: &OwnedFd, req: &Request) -> Reply {
    sock::send(s.as_raw_fd(), &req.encode(), None).expect("send");
    let p = sock::recv(s.as_raw_fd()).expect("recv").expect("a reply");
    Reply::decode(&p.bytes).expect("a reply")
}

/// A client connection that has said hello.
fn client(socket: &str) -> OwnedFd {
    let s = sock::connect(socket).expect("connect");
    let hello = Request::Hello {
        parent: 0,
        ticks_per_call: 0,
        comm: "ksimd-bench".into(),
        path: String::new(),
        image: 0,
    };
    match exchange(&s, &hello) {
        Reply::Welcome { .. } => s,
        r => panic!("hello: {r:?}"),
    }
}

/// `n` requests on `s`; seconds taken.
fn run(s: &OwnedFd, n: u32) -> f64 {
    let req = Request::Call {
        op: PmcOp::Getdriverstats.raw(),
        arg: vec![0; size_of::<PmcOpGetdriverstats>()],
        with_fd: false,
    };
    let start = Instant::now();
    for _ in 0..n {
        match exchange(s, &req) {
            Reply::Called { errno: 0, .. } => {}
            r => panic!("GETDRIVERSTATS: {r:?}"),
        }
    }
    start.elapsed().as_secs_f64()
}

/// Requests per second from `clients` connections at once, median of 5.
fn measure(socket: &str, clients: usize, n: u32) -> f64 {
    let conns: Vec<OwnedFd> = (0..clients).map(|_| client(socket)).collect();
    let mut rates: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            std::thread::scope(|sc| {
                for c in &conns {
                    sc.spawn(move || run(c, n));
                }
            });
            f64::from(n) * clients as f64 / start.elapsed().as_secs_f64()
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[2]
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("REQUESTS is a number"))
        .unwrap_or(20_000);
    let private = server::start_private(SimConfig {
        cpus: 1,
        ..SimConfig::default()
    })
    .expect("a private machine");
    let exe = std::env::current_exe().expect("this program's path");
    let daemon =
        ksimd::daemon::Daemon::start(&ksimd::daemon::binary_beside(&exe), &["-c", "1", "-r", "0"])
            .expect("a ksimd daemon beside this program");
    let daemon_socket = daemon.socket().to_string_lossy().into_owned();
    println!("machine        clients   requests/s   us/request");
    for (name, socket) in [("private", private.as_str()), ("daemon", &daemon_socket)] {
        for clients in [1, 4] {
            let rate = measure(socket, clients, n);
            println!(
                "{name:<14} {clients:>7} {rate:>12.0} {:>12.1}",
                1e6 / rate * clients as f64
            );
        }
    }
    assert!(daemon.stop().success(), "ksimd's checks at its stop");
}

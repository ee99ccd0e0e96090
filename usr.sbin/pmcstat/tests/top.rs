//! pmcstat -T as a person uses it: live, on a terminal (tmux), on the
//! simulated machine running ksim's `sort`: the screen shows FreeBSD's
//! layout with the program's functions, keys answer on the second line,
//! and `q` ends the run. Also the view of a log (-R) written to a file.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn tmux(socket: &str, args: &[&str]) -> String {
    let o = Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .output()
        .expect("tmux is installed");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Waits until the pane shows `what`; the screen when it does.
fn wait_for(socket: &str, what: &str) -> String {
    let start = Instant::now();
    loop {
        let screen = tmux(socket, &["capture-pane", "-p", "-t", "top"]);
        if screen.contains(what) {
            return screen;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the screen never showed {what:?}:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_top_view_in_a_terminal() {
    let dir = std::env::temp_dir().join(format!("pmcstat-top-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = dir.join("root");
    let status = dir.join("status");
    let socket = format!("pmcstat-top-{}", std::process::id());
    let command = format!(
        "env LIBPMC_TRANSPORT=sim LIBPMC_SIM_CPUS=1 LIBPMC_SIM_WORKLOAD=sort:1000000 \
         LIBPMC_SIM_FILES={root} {pmcstat} -T -r {root} -n 20000 -S instructions -w 0.5; \
         echo $? > {status}; sleep 60",
        root = root.display(),
        pmcstat = env!("CARGO_BIN_EXE_pmcstat"),
        status = status.display(),
    );
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "120",
            "-y",
            "30",
            &command,
        ],
    );
    let screen = wait_for(&socket, "quick_sort");
    let lines: Vec<&str> = screen.lines().collect();
    assert!(
        lines[0].starts_with("PMC: [inst_retired.any_p] Samples: "),
        "{screen}"
    );
    assert!(lines[0].ends_with(" unresolved"), "{screen}");
    assert_eq!(
        lines[2].trim_end(),
        "%SAMP IMAGE      FUNCTION                       CALLERS",
        "{screen}"
    );
    assert!(
        lines[3..]
            .iter()
            .any(|l| l.contains(" sort       quick_sort ")),
        "{screen}"
    );
    // A key's answer shows on the second line.
    tmux(&socket, &["send-keys", "-t", "top", "c", "a"]);
    wait_for(&socket, "switching to accumulation mode");
    tmux(&socket, &["send-keys", "-t", "top", " "]);
    wait_for(&socket, "Key:   => pause => press space again to continue");
    tmux(&socket, &["send-keys", "-t", "top", " "]);
    tmux(&socket, &["send-keys", "-t", "top", "q"]);
    let start = Instant::now();
    while !status.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "q did not end pmcstat"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let code = std::fs::read_to_string(&status).unwrap();
    tmux(&socket, &["kill-server"]);
    assert_eq!(code.trim(), "0");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_top_view_of_a_log_written_to_a_file() {
    let dir: PathBuf = std::env::temp_dir().join(format!("pmcstat-top-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log");
    let root = dir.join("root");
    let o = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
        .args(["-n", "20000", "-S", "instructions", "-l", "1", "-O"])
        .arg(&log)
        .env("LIBPMC_TRANSPORT", "sim")
        .env("LIBPMC_SIM_CPUS", "1")
        .env("LIBPMC_SIM_WORKLOAD", "sort:100000")
        .env("LIBPMC_SIM_FILES", &root)
        .output()
        .unwrap();
    assert!(o.status.success());
    let o = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
        .arg("-R")
        .arg(&log)
        .arg("-r")
        .arg(&root)
        .arg("-T")
        .output()
        .unwrap();
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    // One view, then the separator (the output is not a terminal).
    assert!(
        out.starts_with("PMC: [inst_retired.any_p] Samples: "),
        "{out}"
    );
    assert!(
        out.contains("(100.0%) , 0 unresolved\n\n%SAMP IMAGE "),
        "{out}"
    );
    assert!(out.contains("\n---\n"), "{out}");
    let rows: Vec<&str> = out.lines().skip(3).take_while(|l| *l != "---").collect();
    let shares: Vec<f64> = rows
        .iter()
        .map(|l| l[..5].trim().parse().unwrap())
        .collect();
    assert!(shares.windows(2).all(|w| w[0] >= w[1]), "sorted: {out}");
    let total: f64 = shares.iter().sum();
    assert!((total - 100.0).abs() < 0.5, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

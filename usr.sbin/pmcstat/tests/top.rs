//! pmcstat -T as a person uses it: live, on a terminal (tmux), on the
//! simulated machine running ksim's `sort`: the screen shows FreeBSD's
//! layout with the program's functions, keys answer on the second line,
//! `n` switches between the call graph and the calltree, and `q` ends
//! the run. Also the view of a log (-R) written to a file, and the views
//! of a log on a terminal, whose calltree rows are checked against the
//! samples of the log's text dump and the program's nm(1) symbols.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{function_of, functions, samples};

fn tmux(socket: &str, args: &[&str]) -> String {
    let o = Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .output()
        .expect("tmux is installed");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A detached session of 120 by 30 running `command`.
fn start_session(socket: &str, command: &str) {
    tmux(
        socket,
        &[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "120",
            "-y",
            "30",
            command,
        ],
    );
}

/// Types q: pmcstat must end with status 0 (written to `status` by the
/// session's command) within a minute; the session goes.
fn quit(socket: &str, status: &Path) {
    tmux(socket, &["send-keys", "-t", "top", "q"]);
    let start = Instant::now();
    while !status.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "q did not end pmcstat"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let code = std::fs::read_to_string(status).unwrap();
    tmux(socket, &["kill-server"]);
    assert_eq!(code.trim(), "0");
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
    start_session(&socket, &command);
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
    // n: the calltree, from no samples, then rows of it again.
    tmux(&socket, &["send-keys", "-t", "top", "n"]);
    wait_for(&socket, "Key: n => switching to plugin calltree");
    let screen = wait_for(&socket, "quick_sort(");
    let lines: Vec<&str> = screen.lines().collect();
    assert_eq!(lines[2].trim_end(), "%SAMP CALLTREE", "{screen}");
    for row in lines[3..].iter().filter(|l| !l.trim().is_empty()) {
        // The row's share, then its functions, the first with its image.
        let (share, path) = row.split_at(6);
        assert!(share.trim().parse::<f64>().is_ok(), "{screen}");
        assert!(path.starts_with("_start@sort "), "{screen}");
    }
    // n again: the call graph.
    tmux(&socket, &["send-keys", "-t", "top", "n"]);
    wait_for(&socket, "Key: n => switching to plugin callgraph");
    wait_for(&socket, " sort       quick_sort ");
    // A key's answer shows on the second line.
    tmux(&socket, &["send-keys", "-t", "top", "c", "a"]);
    wait_for(&socket, "switching to accumulation mode");
    tmux(&socket, &["send-keys", "-t", "top", " "]);
    wait_for(&socket, "Key:   => pause => press space again to continue");
    tmux(&socket, &["send-keys", "-t", "top", " "]);
    quit(&socket, &status);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_top_view_of_a_log_written_to_a_file() {
    let (dir, log, root) = sort_log("top-log");
    // pmcstat -T of the log, `options` first: its standard output.
    let top = |options: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
            .args(options)
            .arg("-R")
            .arg(&log)
            .arg("-r")
            .arg(&root)
            .arg("-T")
            .output()
            .unwrap();
        assert!(o.status.success(), "{options:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = top(&[]);
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
    // After the display, the conversion statistics of its samples (the
    // header's count), unless -q.
    let samples: u64 = out["PMC: [inst_retired.any_p] Samples: ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let stats = &out[out.rfind("---\n").unwrap() + 4..];
    assert_eq!(
        stats,
        format!(
            "CONVERSION STATISTICS:\n {:<40} {samples}\n",
            "#samples/total"
        ),
        "{out}"
    );
    assert!(top(&["-q"]).ends_with("---\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A log of `sort` (with the machine's files) in a new directory.
fn sort_log(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir: PathBuf = std::env::temp_dir().join(format!("pmcstat-{name}-{}", std::process::id()));
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
    (dir, log, root)
}

/// The calltree view's rows as the samples make them, each as the
/// screen shows it (without its trailing space), with its sum; and the
/// rows with `skiplink` (`f`). Each sample's chain, named by nm and
/// read from the root, with a recursive function's repeated frames
/// counted once, is a path; a path goes on into a callee when more than
/// 0.5% of the samples (the default threshold) went through both; a row
/// is a path that goes on no further, its share the sum of the own
/// samples of its functions, and each function shows its own share
/// when that is over the threshold. (This holds for `sort`, whose
/// functions each have one caller.)
fn expected_calltree_rows(log: &Path, binary: &Path) -> Vec<(u64, String, String)> {
    let funcs = functions(binary);
    let all = samples(log.to_str().unwrap());
    let total = all.len() as u64;
    let mut own: BTreeMap<String, u64> = BTreeMap::new();
    let mut through: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    for (_, _, pcs) in &all {
        let mut path: Vec<String> = pcs
            .iter()
            .rev()
            .map(|&pc| {
                function_of(&funcs, pc)
                    .expect("a function of sort")
                    .2
                    .clone()
            })
            .collect();
        path.dedup();
        *own.entry(path.last().unwrap().clone()).or_insert(0) += 1;
        for k in 1..=path.len() {
            *through.entry(path[..k].to_vec()).or_insert(0) += 1;
        }
    }
    let share = |n: u64| n as f64 * 100.0 / total as f64;
    let followed = |p: &Vec<String>| share(through[p]) > 0.5;
    let mut rows = Vec::new();
    for path in through.keys().filter(|p| followed(p)) {
        let goes_on = through
            .keys()
            .any(|q| q.len() == path.len() + 1 && q.starts_with(path) && followed(q));
        if goes_on {
            continue;
        }
        let sum: u64 = path.iter().map(|f| own.get(f).copied().unwrap_or(0)).sum();
        let mut plain = format!("{:>5.1}", share(sum));
        let mut skipping = plain.clone();
        for (i, f) in path.iter().enumerate() {
            let v = share(own.get(f).copied().unwrap_or(0));
            let image = if i == 0 { "@sort" } else { "" };
            let value = if v > 0.5 {
                format!("({v:.1}%)")
            } else {
                String::new()
            };
            plain.push_str(&format!(" {f}{image}{value}"));
            if v > 0.5 {
                skipping.push_str(&format!(" {f}{image}{value}"));
            } else {
                skipping.push_str(" .");
            }
        }
        rows.push((sum, plain, skipping));
    }
    rows
}

/// The rows under the calltree's header, as the screen shows them.
fn calltree_rows(screen: &str) -> Vec<String> {
    let lines: Vec<&str> = screen.lines().collect();
    assert_eq!(lines[2].trim_end(), "%SAMP CALLTREE", "{screen}");
    lines[3..]
        .iter()
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_views_of_a_log_in_a_terminal() {
    let (dir, log, root) = sort_log("top-views");
    let expected = expected_calltree_rows(&log, &root.join("usr/bin/sort"));
    assert!(expected.len() >= 2, "{expected:?}");
    let status = dir.join("status");
    let socket = format!("pmcstat-top-views-{}", std::process::id());
    let command = format!(
        "{pmcstat} -R {log} -r {root} -T; echo $? > {status}; sleep 60",
        pmcstat = env!("CARGO_BIN_EXE_pmcstat"),
        log = log.display(),
        root = root.display(),
        status = status.display(),
    );
    start_session(&socket, &command);
    // The call graph first, then, with n, the calltree of the whole log
    // (a log that has ended keeps its samples).
    wait_for(&socket, " sort       quick_sort ");
    tmux(&socket, &["send-keys", "-t", "top", "n"]);
    let screen = wait_for(&socket, "Key: n => switching to plugin calltree");
    let rows = calltree_rows(&screen);
    // The most sampled first; rows of equal sums in any order.
    let mut sorted = expected.clone();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.0));
    let sums: Vec<&str> = rows.iter().map(|r| &r[..5]).collect();
    let want: Vec<String> = sorted.iter().map(|r| r.1[..5].to_owned()).collect();
    assert_eq!(sums, want, "{screen}");
    let mut shown = rows.clone();
    shown.sort();
    let mut want: Vec<String> = expected.iter().map(|r| r.1.clone()).collect();
    want.sort();
    assert_eq!(shown, want, "{screen}");
    // The recursive quick_sort ends a row of its own.
    assert!(
        rows.iter()
            .any(|r| r.contains(" main(") && r.contains(" quick_sort(")),
        "{screen}"
    );
    // f: the functions under the threshold as ".".
    tmux(&socket, &["send-keys", "-t", "top", "f"]);
    let screen = wait_for(&socket, "Key: f => skip empty link on");
    let mut shown = calltree_rows(&screen);
    shown.sort();
    let mut want: Vec<String> = expected.iter().map(|r| r.2.clone()).collect();
    want.sort();
    assert_eq!(shown, want, "{screen}");
    tmux(&socket, &["send-keys", "-t", "top", "f"]);
    wait_for(&socket, "Key: f => skip empty link off");
    // n again: the call graph, with the whole log still.
    tmux(&socket, &["send-keys", "-t", "top", "n"]);
    let screen = wait_for(&socket, "Key: n => switching to plugin callgraph");
    assert!(
        screen.contains("%SAMP IMAGE      FUNCTION                       CALLERS"),
        "{screen}"
    );
    assert!(screen.contains(" sort       quick_sort "), "{screen}");
    quit(&socket, &status);
    std::fs::remove_dir_all(&dir).unwrap();
}

//! What the analysis tests read a log and a program with, independently
//! of the code under test: the sampled PCs from pmcstat's -R text dump
//! (the records as the log has them) and the functions from binutils'
//! nm(1).

use std::path::Path;
use std::process::Command;

/// Lossy text of a program's output.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// nm(1)'s function symbols of `path`: (start, end, name), sorted.
pub fn functions(path: &Path) -> Vec<(u64, u64, String)> {
    let o = Command::new("nm")
        .args(["-n", "-S", "--defined-only"])
        .arg(path)
        .output()
        .expect("nm (binutils) is installed");
    assert!(o.status.success());
    text(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 4 || !matches!(f[2], "T" | "t") {
                return None;
            }
            let start = u64::from_str_radix(f[0], 16).ok()?;
            let size = u64::from_str_radix(f[1], 16).ok()?;
            Some((start, start + size, f[3].to_owned()))
        })
        .collect()
}

/// The function of `funcs` that holds `pc`.
pub fn function_of(funcs: &[(u64, u64, String)], pc: u64) -> Option<&(u64, u64, String)> {
    funcs.iter().find(|(s, e, _)| (*s..*e).contains(&pc))
}

/// The samples of the -R text dump: (pid, mode, PCs, the sampled one
/// first).
pub fn samples(log: &str) -> Vec<(String, char, Vec<u64>)> {
    let o = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
        .args(["-R", log])
        .output()
        .expect("run pmcstat");
    assert!(o.status.success());
    let dump = text(&o.stdout);
    let mut out = Vec::new();
    let mut lines = dump.lines().peekable();
    while let Some(l) = lines.next() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first() != Some(&"callchain") {
            continue;
        }
        let n: usize = f[4].parse().unwrap();
        let pcs = (0..n)
            .map(|_| {
                let pc = lines.next().unwrap().split_whitespace().nth(1).unwrap();
                u64::from_str_radix(pc.trim_start_matches("0x"), 16).unwrap()
            })
            .collect();
        out.push((f[1].to_owned(), f[5].chars().next().unwrap(), pcs));
    }
    out
}

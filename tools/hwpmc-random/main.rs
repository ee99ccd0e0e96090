//! hwpmc-random: runs seeded random operation sequences against hwpmc on
//! the simulated machine until a step budget or a time limit is spent.
//!
//!     hwpmc-random [-s first-seed] [-n steps] [-l length] [-t seconds]
//!     hwpmc-random -r seed [-l length]      replay one seed, shrink it
//!
//! On a broken invariant it prints the seed, the failure and the shortest
//! sequence found that still fails, and exits 1.

use std::process::ExitCode;
use std::time::{Duration, Instant};

fn usage() -> ExitCode {
    eprintln!(
        "usage: hwpmc-random [-s seed] [-n steps] [-l length] [-t seconds] | -r seed [-l length]"
    );
    ExitCode::from(64)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seed = 1u64;
    let mut steps = 200_000u64;
    let mut len = 200usize;
    let mut seconds: Option<u64> = None;
    let mut replay = None;
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).and_then(|v| v.parse::<u64>().ok());
        let Some(value) = value else {
            eprintln!("hwpmc-random: {} needs a number", args[i]);
            return usage();
        };
        match args[i].as_str() {
            "-s" => seed = value,
            "-n" => steps = value,
            "-l" if value > 0 => len = value as usize,
            "-t" => seconds = Some(value),
            "-r" => replay = Some(value),
            other => {
                eprintln!("hwpmc-random: unknown option {other}");
                return usage();
            }
        }
        i += 2;
    }
    if let Some(seed) = replay {
        // HWPMC_RANDOM_PANICS=1 keeps the default hook: backtraces.
        if std::env::var_os("HWPMC_RANDOM_PANICS").is_none() {
            std::panic::set_hook(Box::new(|_| {}));
        }
        let ops = hwpmc_random::sequence(seed, len);
        return match hwpmc_random::run(&ops) {
            Ok(()) => {
                println!("seed {seed}: {len} steps, no invariant broken");
                ExitCode::SUCCESS
            }
            Err(_) => report(seed, &ops),
        };
    }
    // Panics are failures the harness reports with their message; the
    // default hook's backtraces for each shrinking attempt are noise.
    std::panic::set_hook(Box::new(|_| {}));
    let start = Instant::now();
    let deadline = seconds.map(|s| start + Duration::from_secs(s));
    let sequences = if deadline.is_some() {
        u64::MAX / 2
    } else {
        steps.div_ceil(len as u64)
    };
    match hwpmc_random::batch(seed, sequences, len, || {
        deadline.is_none_or(|d| Instant::now() < d)
    }) {
        Ok(t) => {
            println!(
                "{} sequences of {len} steps from seed {seed}: {} steps in {:.1} s, no invariant broken",
                t.sequences,
                t.steps,
                start.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err((seed, small, f)) => {
            println!("seed {seed} fails {f}");
            println!("shortest failing sequence ({} steps):", small.len());
            for op in &small {
                println!("  {op:?}");
            }
            ExitCode::FAILURE
        }
    }
}

fn report(seed: u64, ops: &[hwpmc_random::Op]) -> ExitCode {
    let (small, f) = hwpmc_random::shrink(ops, 5000);
    println!("seed {seed} fails {f}");
    println!("shortest failing sequence ({} steps):", small.len());
    for op in &small {
        println!("  {op:?}");
    }
    ExitCode::FAILURE
}

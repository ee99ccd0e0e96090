//! CI's fixed budget of the random-operation harness: 1,000 sequences of
//! 200 steps (200,000 steps) from seed 1, or from HWPMC_RANDOM_SEED.
//! tools/fuzz runs it for as long as asked.

#[test]
fn two_hundred_thousand_random_steps_break_no_invariant() {
    let first = std::env::var("HWPMC_RANDOM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    match hwpmc_random::batch(first, 1000, 200, || true) {
        Ok(t) => assert_eq!(t.steps, 200_000),
        Err((seed, small, failure)) => {
            let steps: Vec<String> = small.iter().map(|op| format!("  {op:?}")).collect();
            panic!(
                "seed {seed} fails {failure}\nshortest failing sequence ({} steps):\n{}",
                small.len(),
                steps.join("\n")
            );
        }
    }
}

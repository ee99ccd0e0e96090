//! The fuzz target's driver (sys/dev/hwt/fuzz/ioctl_driver.rs) over
//! seeded random inputs, in CI: thousands of operation streams with
//! garbage arguments, each ending clean.

// Host test code.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

#[path = "../fuzz/ioctl_driver.rs"]
mod ioctl_driver;

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn random_operation_streams_end_clean() {
    let mut seed = 0x4857_5420_u64;
    let mut total = ioctl_driver::Stats::default();
    for round in 0..2000 {
        let len = (splitmix(&mut seed) % 600) as usize;
        let data: Vec<u8> = (0..len).map(|_| splitmix(&mut seed) as u8).collect();
        let r = std::panic::catch_unwind(|| ioctl_driver::run(&data));
        let Ok(s) = r else {
            panic!("round {round}: input {data:02x?}");
        };
        total.calls += s.calls;
        total.allocs += s.allocs;
        total.succeeded += s.succeeded;
    }
    // The streams reach the contexts: ALLOCs succeed, and so do calls on
    // the contexts' devices.
    eprintln!("{total:?}");
    assert!(total.allocs > 500, "{total:?}");
    assert!(total.succeeded > total.allocs + 800, "{total:?}");
}

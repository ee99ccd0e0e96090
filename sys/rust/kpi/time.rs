//! Time: the TSC and the wall clock.

/// `rdtsc()` on the current CPU.
#[inline]
pub fn rdtsc() -> u64 {
    crate::backend::rdtsc()
}

/// `tsc_freq` in Hz.
pub fn tsc_freq() -> u64 {
    crate::backend::tsc_freq()
}

/// `nanotime()`: (seconds, nanoseconds) since the epoch.
pub fn nanotime() -> (i64, i64) {
    crate::backend::nanotime()
}

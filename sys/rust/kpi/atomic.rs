//! atomic(9): atomic integers for the kernel crates. Each operation is a
//! scheduling point of the simulator's races (ksim's `sched`), as a lock
//! or an allocation is, so that races between counters and flags show; on
//! FreeBSD they are the plain atomics. The operations are inlined into
//! their callers, so that each is the one instruction of the plain atomic
//! there (and a call of the scheduling point in the simulator).

// This module is where core's atomics are allowed: it wraps them.
#![allow(clippy::disallowed_types)]

pub use core::sync::atomic::Ordering;

macro_rules! atomic_int {
    ($(#[$m:meta])* $name:ident, $inner:ty, $t:ty) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        #[repr(transparent)]
        pub struct $name($inner);

        impl $name {
            /// A new atomic holding `v`.
            pub const fn new(v: $t) -> Self {
                $name(<$inner>::new(v))
            }
            /// The value.
            #[inline]
            pub fn load(&self, order: Ordering) -> $t {
                crate::backend::sched_point();
                self.0.load(order)
            }
            /// The value, by a relaxed load that is no scheduling point
            /// of the simulator's races: for words that only select
            /// diagnostics (trace masks), read on hot paths, whose races
            /// decide nothing.
            #[inline]
            pub fn load_quiet(&self) -> $t {
                self.0.load(Ordering::Relaxed)
            }
            /// Stores `v`.
            #[inline]
            pub fn store(&self, v: $t, order: Ordering) {
                crate::backend::sched_point();
                self.0.store(v, order)
            }
            /// Adds `v`; returns the previous value.
            #[inline]
            pub fn fetch_add(&self, v: $t, order: Ordering) -> $t {
                crate::backend::sched_point();
                self.0.fetch_add(v, order)
            }
            /// Subtracts `v`; returns the previous value.
            #[inline]
            pub fn fetch_sub(&self, v: $t, order: Ordering) -> $t {
                crate::backend::sched_point();
                self.0.fetch_sub(v, order)
            }
            /// Stores `v`; returns the previous value.
            #[inline]
            pub fn swap(&self, v: $t, order: Ordering) -> $t {
                crate::backend::sched_point();
                self.0.swap(v, order)
            }
            /// Sets the bits of `v` (`atomic_set`); returns the previous
            /// value.
            #[inline]
            pub fn fetch_or(&self, v: $t, order: Ordering) -> $t {
                crate::backend::sched_point();
                self.0.fetch_or(v, order)
            }
            /// Keeps only the bits of `v` (`atomic_clear` of the others);
            /// returns the previous value.
            #[inline]
            pub fn fetch_and(&self, v: $t, order: Ordering) -> $t {
                crate::backend::sched_point();
                self.0.fetch_and(v, order)
            }
            /// Stores `new` if the value is `current` (`atomic_fcmpset`);
            /// the previous value, as `Ok` when it was stored.
            #[inline]
            pub fn compare_exchange(
                &self,
                current: $t,
                new: $t,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$t, $t> {
                crate::backend::sched_point();
                self.0.compare_exchange(current, new, success, failure)
            }
        }
    };
}

atomic_int!(
    /// `atomic_*_32`.
    AtomicU32,
    core::sync::atomic::AtomicU32,
    u32
);
atomic_int!(
    /// `atomic_*_64` (`counter(9)` where FreeBSD uses a per-CPU counter).
    AtomicU64,
    core::sync::atomic::AtomicU64,
    u64
);

/// An atomic flag.
#[derive(Debug, Default)]
#[repr(transparent)]
pub struct AtomicBool(core::sync::atomic::AtomicBool);

impl AtomicBool {
    /// A new flag holding `v`.
    pub const fn new(v: bool) -> Self {
        AtomicBool(core::sync::atomic::AtomicBool::new(v))
    }
    /// The value.
    #[inline]
    pub fn load(&self, order: Ordering) -> bool {
        crate::backend::sched_point();
        self.0.load(order)
    }
    /// Stores `v`.
    #[inline]
    pub fn store(&self, v: bool, order: Ordering) {
        crate::backend::sched_point();
        self.0.store(v, order)
    }
    /// Stores `v`; returns the previous value.
    #[inline]
    pub fn swap(&self, v: bool, order: Ordering) -> bool {
        crate::backend::sched_point();
        self.0.swap(v, order)
    }
}

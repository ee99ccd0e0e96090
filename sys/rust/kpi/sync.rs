//! Locks: spin and sleep mutexes (mtx(9)) and shared/exclusive locks
//! (sx(9)), each guarding the data it protects.
//!
//! Every lock has a class name; the simulator's witness learns the order in
//! which classes are taken and reports reversals, recursion, and sleep
//! locks or allocations under a spin lock.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

pub use crate::backend::LockKind;

use crate::backend::LockWord;

macro_rules! guarded_lock {
    ($(#[$m:meta])* $name:ident, $guard:ident, $kind:expr) => {
        $(#[$m])*
        #[derive(Debug)]
        pub struct $name<T> {
            word: LockWord,
            data: UnsafeCell<T>,
        }

        // SAFETY: the lock word gives one holder exclusive access to `data`
        // (acquire/release ordering), so sharing the lock between threads
        // is as safe as sending `T` to the holder.
        unsafe impl<T: Send> Sync for $name<T> {}
        // SAFETY: moving the lock moves `T`.
        unsafe impl<T: Send> Send for $name<T> {}

        impl<T> $name<T> {
            /// A new unlocked lock of witness class `class`.
            pub const fn new(class: &'static str, data: T) -> Self {
                $name { word: LockWord::new(class, $kind), data: UnsafeCell::new(data) }
            }

            /// Takes the lock.
            pub fn lock(&self) -> $guard<'_, T> {
                self.word.lock_exclusive();
                $guard { lock: self }
            }

            /// The data, through exclusive access to the lock itself.
            pub fn get_mut(&mut self) -> &mut T {
                self.data.get_mut()
            }
        }

        /// Holds the lock until dropped.
        #[derive(Debug)]
        pub struct $guard<'a, T> {
            lock: &'a $name<T>,
        }

        impl<T> Deref for $guard<'_, T> {
            type Target = T;
            fn deref(&self) -> &T {
                // SAFETY: the guard holds the lock exclusively.
                unsafe { &*self.lock.data.get() }
            }
        }

        impl<T> DerefMut for $guard<'_, T> {
            fn deref_mut(&mut self) -> &mut T {
                // SAFETY: the guard holds the lock exclusively.
                unsafe { &mut *self.lock.data.get() }
            }
        }

        impl<T> Drop for $guard<'_, T> {
            fn drop(&mut self) {
                self.lock.word.unlock_exclusive();
            }
        }
    };
}

guarded_lock!(
    /// A sleep mutex (`mtx_init(..., MTX_DEF)`).
    Mutex,
    MutexGuard,
    LockKind::Sleep
);
guarded_lock!(
    /// A spin mutex (`MTX_SPIN`): nothing may sleep or allocate with
    /// `M_WAITOK` while it is held.
    SpinMutex,
    SpinMutexGuard,
    LockKind::Spin
);
guarded_lock!(
    /// A shared/exclusive lock (`sx(9)`); [`Sx::lock`] is `sx_xlock`.
    Sx,
    SxGuard,
    LockKind::Sx
);

impl<T> Sx<T> {
    /// `sx_slock`: shared access.
    pub fn lock_shared(&self) -> SxSharedGuard<'_, T> {
        self.word.lock_shared();
        SxSharedGuard { lock: self }
    }
}

/// Holds an [`Sx`] shared until dropped.
#[derive(Debug)]
pub struct SxSharedGuard<'a, T> {
    lock: &'a Sx<T>,
}

impl<T> Deref for SxSharedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: shared holders only read; writers need the exclusive
        // state, which excludes shared holders.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> Drop for SxSharedGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.word.unlock_shared();
    }
}

//! Locks: spin and default mutexes (mtx(9)) and shared/exclusive locks
//! (sx(9)), each guarding the data it protects.
//!
//! The kernel knows a lock by its address and keeps a pointer to its name,
//! so a lock never moves once the kernel has it: the constructors return
//! the lock pinned on the kernel heap (`Pin<KBox<_>>`), initialised there
//! (`mtx_init` / `sx_init`), and nothing gives a lock out by value again.
//! Names are `&'static CStr`, as the kernel keeps them. Guards stay on the
//! thread that took the lock (they are not `Send`), and an [`Sx`] shares
//! its data between readers, so it needs `T: Sync` as well as `T: Send`.
//!
//! Each rule is checked at compile time; these do not compile:
//!
//! An sx whose data cannot be shared between readers:
//! ```compile_fail,E0277
//! fn shared<T: Sync>() {}
//! shared::<kpi::sync::Sx<core::cell::Cell<u32>>>();
//! ```
//! while data that can be is fine:
//! ```no_run
//! fn shared<T: Sync>() {}
//! shared::<kpi::sync::Sx<u32>>();
//! shared::<kpi::sync::Mutex<core::cell::Cell<u32>>>();
//! ```
//!
//! A guard released on another thread:
//! ```compile_fail,E0277
//! fn send<T: Send>(_: T) {}
//! let m = kpi::sync::Mutex::new(c"m", 0u32, kpi::malloc::Wait::WaitOk).unwrap();
//! send(m.lock());
//! ```
//! ```compile_fail,E0277
//! fn send<T: Send>(_: T) {}
//! let s = kpi::sync::Sx::new(c"s", 0u32, kpi::malloc::Wait::WaitOk).unwrap();
//! send(s.lock_shared());
//! ```
//! while the lock itself may be handed to another thread:
//! ```no_run
//! fn send<T: Send>(_: T) {}
//! let m = kpi::sync::Mutex::new(c"m", 0u32, kpi::malloc::Wait::WaitOk).unwrap();
//! send(m);
//! ```
//!
//! A lock moved out of its place once initialised:
//! ```compile_fail,E0507
//! let m = kpi::sync::SpinMutex::new(c"m", 0u32, kpi::malloc::Wait::WaitOk).unwrap();
//! let moved: kpi::sync::SpinMutex<u32> = *m;
//! ```
//! ```compile_fail,E0596
//! let mut a = kpi::sync::Mutex::new(c"a", 0u32, kpi::malloc::Wait::WaitOk).unwrap();
//! let mut b = kpi::sync::Mutex::new(c"b", 1u32, kpi::malloc::Wait::WaitOk).unwrap();
//! core::mem::swap(&mut *a, &mut *b);
//! ```
//! ```compile_fail,E0277
//! let m = kpi::sync::Mutex::new(c"m", 0u32, kpi::malloc::Wait::WaitOk).unwrap();
//! let unpinned = core::pin::Pin::into_inner(m);
//! ```
//! (moving the pinned box itself is fine: the lock stays where it is)
//! ```no_run
//! let m = kpi::sync::Mutex::new(c"m", 0u32, kpi::malloc::Wait::WaitOk).unwrap();
//! let moved_box = m;
//! *moved_box.lock() += 1;
//! ```
//!
//! A name the kernel could not keep:
//! ```compile_fail,E0597
//! let name = std::ffi::CString::new("m").unwrap();
//! let m = kpi::sync::Mutex::new(&name, 0u32, kpi::malloc::Wait::WaitOk);
//! ```

use core::cell::UnsafeCell;
use core::ffi::CStr;
use core::marker::{PhantomData, PhantomPinned};
use core::ops::{Deref, DerefMut};
use core::pin::Pin;

pub use crate::backend::LockKind;

use crate::backend::LockWord;
use crate::errno::KResult;
use crate::malloc::{KBox, Wait};

/// A [`Mutex`] where it lives: pinned on the kernel heap.
pub type MutexBox<T> = Pin<KBox<Mutex<T>>>;
/// A [`SpinMutex`] where it lives: pinned on the kernel heap.
pub type SpinMutexBox<T> = Pin<KBox<SpinMutex<T>>>;
/// An [`Sx`] where it lives: pinned on the kernel heap.
pub type SxBox<T> = Pin<KBox<Sx<T>>>;

/// Makes a guard neither `Send` nor (by default) `Sync`: a lock is
/// released by the thread that took it.
type NotSend = PhantomData<*mut ()>;

macro_rules! guarded_lock {
    ($(#[$m:meta])* $name:ident, $guard:ident, $kind:expr, $($bound:tt)+) => {
        $(#[$m])*
        #[derive(Debug)]
        pub struct $name<T> {
            word: LockWord,
            data: UnsafeCell<T>,
            _pinned: PhantomPinned,
        }

        // SAFETY: the lock gives one holder at a time access to `data`
        // (acquire/release ordering), so sharing the lock between threads
        // is as safe as sending `T` to the holder (and, for sx, sharing it
        // between readers: see the bound).
        unsafe impl<T: $($bound)+> Sync for $name<T> {}
        // SAFETY: a lock handed to another thread (inside its pinned box)
        // hands over `T`.
        unsafe impl<T: Send> Send for $name<T> {}

        impl<T> $name<T> {
            /// A new unlocked lock named `name` (its witness class),
            /// initialised in place on the kernel heap.
            pub fn new(name: &'static CStr, data: T, wait: Wait) -> KResult<Pin<KBox<Self>>> {
                let lock = KBox::try_pin(
                    $name {
                        word: LockWord::new(name, $kind),
                        data: UnsafeCell::new(data),
                        _pinned: PhantomPinned,
                    },
                    wait,
                )?;
                // SAFETY: the lock is pinned: the kernel's lock object is
                // initialised at the address it keeps until it is dropped.
                unsafe { lock.word.init() };
                Ok(lock)
            }

            /// Takes the lock.
            pub fn lock(&self) -> $guard<'_, T> {
                self.word.lock_exclusive();
                $guard { lock: self, _not_send: PhantomData }
            }

            /// The data, through exclusive access to the lock itself.
            pub fn data_mut(self: Pin<&mut Self>) -> &mut T {
                // SAFETY: the data is not structurally pinned (only the
                // lock word is), and `self` is exclusive.
                unsafe { self.get_unchecked_mut().data.get_mut() }
            }
        }

        /// Holds the lock until dropped, on the thread that took it.
        #[derive(Debug)]
        pub struct $guard<'a, T> {
            lock: &'a $name<T>,
            _not_send: NotSend,
        }

        // SAFETY: a shared guard only reads `T` (as `&T` from any thread).
        unsafe impl<T: Sync> Sync for $guard<'_, T> {}

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
    /// A default mutex (`mtx_init(..., MTX_DEF)`): it may block, but
    /// nothing may sleep while it is held.
    Mutex,
    MutexGuard,
    LockKind::Sleep,
    Send
);
guarded_lock!(
    /// A spin mutex (`MTX_SPIN`): a critical section; nothing may sleep,
    /// allocate or free while it is held.
    SpinMutex,
    SpinMutexGuard,
    LockKind::Spin,
    Send
);
guarded_lock!(
    /// A shared/exclusive lock (`sx(9)`); [`Sx::lock`] is `sx_xlock`.
    /// Holders may sleep.
    Sx,
    SxGuard,
    LockKind::Sx,
    Send + Sync
);

impl<T> Sx<T> {
    /// `sx_slock`: shared access.
    pub fn lock_shared(&self) -> SxSharedGuard<'_, T> {
        self.word.lock_shared();
        SxSharedGuard {
            lock: self,
            _not_send: PhantomData,
        }
    }
}

/// Holds an [`Sx`] shared until dropped, on the thread that took it.
#[derive(Debug)]
pub struct SxSharedGuard<'a, T> {
    lock: &'a Sx<T>,
    _not_send: NotSend,
}

// SAFETY: the guard only gives `&T`.
unsafe impl<T: Sync> Sync for SxSharedGuard<'_, T> {}

impl<T> Deref for SxSharedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: shared holders only read (T: Sync for an Sx to be
        // shared); writers need the exclusive state, which excludes them.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> Drop for SxSharedGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.word.unlock_shared();
    }
}

/// `critical_enter(9)` until dropped: no preemption, no migration; nothing
/// may sleep, allocate or free inside.
#[derive(Debug)]
pub struct CriticalSection(NotSend);

impl CriticalSection {
    /// Enters a critical section.
    pub fn enter() -> CriticalSection {
        crate::backend::critical_enter();
        CriticalSection(PhantomData)
    }
}

impl Drop for CriticalSection {
    fn drop(&mut self) {
        crate::backend::critical_exit();
    }
}

/// A wait channel of sleep(9): the address of the object sleepers wait
/// for, as the kernel names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chan(usize);

impl Chan {
    /// The channel of `object`.
    pub fn of<T: ?Sized>(object: &T) -> Chan {
        Chan(object as *const T as *const u8 as usize)
    }
    /// The address.
    pub fn addr(self) -> usize {
        self.0
    }
}

impl<'a, T> MutexGuard<'a, T> {
    /// `msleep(chan, &mtx, catch ? PCATCH : 0, wmesg, 0)`: releases the
    /// mutex once the thread is on the sleep queue (no wakeup is lost in
    /// between), sleeps until [`wakeup`] of `chan` or, with `catch`, a
    /// signal (EINTR), and takes the mutex again.
    pub fn sleep(self, chan: Chan, wmesg: &'static CStr, catch: bool) -> (Self, KResult<()>) {
        let lock = self.lock;
        // The backend releases and retakes the word; the guard must not.
        core::mem::forget(self);
        let r = crate::backend::msleep(&lock.word, chan.0, wmesg, catch);
        (
            MutexGuard {
                lock,
                _not_send: PhantomData,
            },
            r,
        )
    }
}

/// `tsleep(chan, catch ? PCATCH : 0, wmesg, 0)`: sleeps with no
/// interlock until [`wakeup`] of `chan` or, with `catch`, a signal.
pub fn tsleep(chan: Chan, wmesg: &'static CStr, catch: bool) -> KResult<()> {
    crate::backend::tsleep(chan.0, wmesg, catch)
}

/// `wakeup(9)`: every thread asleep on `chan` runs again.
pub fn wakeup(chan: Chan) {
    crate::backend::wakeup(chan.0);
}

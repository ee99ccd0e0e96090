//! A ring of fixed slots with one producer that never waits and
//! consumers serialised by a spin lock: what an NMI handler uses to hand
//! data to thread or clock-interrupt code. It is the protocol of FreeBSD's
//! sample buffers (`ps_prodidx` and `ps_considx` of hwpmc_mod.c's
//! `pmc_add_sample` and `pmc_process_samples`), as a type.
//!
//! Each slot is a header `T` and a row of `stride` words `U` (a sample and
//! its call chain), all allocated with the ring.
//!
//! # The protocol
//!
//! Two counters, which only grow (64 bits: they never wrap): `prod`, the
//! entries published, written only by the producer, and `cons`, the
//! entries given back, written only by the consumers. The ring has a power
//! of two of slots, at least `n` (so that a slot is chosen with a mask),
//! and holds at most `n` entries; entry `k` lives in slot `k & mask`, and
//! any `n` consecutive entries in distinct slots. The entries in
//! `cons..prod` belong to the consumers, the slots of the others to the
//! producer.
//!
//! - The producer ([`SpscRing::produce`]) claims the producer's role with
//!   an atomic flag, which it never waits for (a second producer is
//!   refused, [`Refused::Busy`]: a misuse, such as two interrupt paths
//!   feeding one ring, cannot become a data race). It reads `cons` with
//!   Acquire, so that everything the consumers did with a slot before
//!   giving it back happened before the producer writes it; a ring of `n`
//!   unconsumed entries is full ([`Refused::Full`]). It fills slot
//!   `prod & mask`, then publishes it by storing `prod + 1` with Release.
//!   It takes no lock, allocates nothing and frees nothing: it may run in
//!   NMI context.
//! - A consumer ([`SpscRing::consumer`]) takes the ring's spin lock, which
//!   serialises the consumers (and, being a spin lock, keeps the clock
//!   interrupt off the CPU meanwhile). It reads `prod` with Acquire, so
//!   that the producer's writes of the slots it published happened before
//!   the consumer reads them, and touches only the entries in
//!   `cons..prod`, oldest first or in place ([`Consumer::with`]). It gives
//!   the oldest back ([`Consumer::pop`]) by storing `cons + 1` with
//!   Release.
//!
//! So a slot is never written by the producer while a consumer has it,
//! nor read by a consumer before the producer published it. The protocol
//! is model-checked with loom: `sys/rust/kpi/loom` compiles this file with
//! loom's atomics, cell and lock (`--cfg loom`) and explores every
//! interleaving of a producer, a consumer at hardclock and the drain at an
//! owner's exit (`tools/test` runs it).

#[cfg(not(loom))]
mod imp {
    use core::cell::UnsafeCell;
    use core::ffi::CStr;

    use crate::KResult;
    pub(super) use crate::atomic::{AtomicBool, AtomicU64, Ordering};
    use crate::errno::ENOMEM;
    use crate::malloc::{KVec, Wait};
    use crate::sync::{SpinMutex, SpinMutexBox, SpinMutexGuard};

    /// The consumers' lock.
    pub(super) type Lock = SpinMutexBox<()>;
    /// A consumer's hold of it.
    pub(super) type Guard<'a> = SpinMutexGuard<'a, ()>;

    pub(super) fn lock(l: &Lock) -> Guard<'_> {
        l.lock()
    }

    /// The slots: `n` headers and `n * stride` words.
    pub(super) struct Slots<T, U> {
        heads: KVec<UnsafeCell<T>>,
        rows: KVec<UnsafeCell<U>>,
        stride: usize,
    }

    impl<T: Default, U: Default> Slots<T, U> {
        pub(super) fn new(
            name: &'static CStr,
            n: usize,
            stride: usize,
            wait: Wait,
        ) -> KResult<(Slots<T, U>, Lock)> {
            let words = n.checked_mul(stride).ok_or(ENOMEM)?;
            let heads = KVec::from_fn(n, wait, |_| UnsafeCell::new(T::default()))?;
            let rows = KVec::from_fn(words, wait, |_| UnsafeCell::new(U::default()))?;
            let lock = SpinMutex::new(name, (), wait)?;
            Ok((
                Slots {
                    heads,
                    rows,
                    stride,
                },
                lock,
            ))
        }
    }

    impl<T, U> Slots<T, U> {
        /// Runs `f` on slot `i`.
        ///
        /// # Safety
        /// The caller has slot `i` to itself for the call (the protocol
        /// gives it the slot), and `i` is below the number of slots.
        #[inline]
        pub(super) unsafe fn with<R>(&self, i: usize, f: impl FnOnce(&mut T, &mut [U]) -> R) -> R {
            let head = self.heads[i].get();
            let row = &self.rows[i * self.stride..(i + 1) * self.stride];
            // UnsafeCell<U> has the layout of U, so the row of cells is a
            // row of words.
            let words = UnsafeCell::raw_get(row.as_ptr());
            // SAFETY: both point into this ring's live storage, inside
            // UnsafeCells (`words` to the `stride` cells of `row`); the
            // caller guarantees that nobody else touches slot `i` (header
            // or row) until `f` returns.
            unsafe {
                f(
                    &mut *head,
                    core::slice::from_raw_parts_mut(words, self.stride),
                )
            }
        }
    }
}

// Host test code (the model check): the kernel's allocation lints do not
// apply to it.
#[cfg(loom)]
#[allow(clippy::disallowed_types, clippy::disallowed_methods)]
mod imp {
    use loom::cell::UnsafeCell;
    pub(super) use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    pub(super) type Lock = loom::sync::Mutex<()>;
    pub(super) type Guard<'a> = loom::sync::MutexGuard<'a, ()>;

    pub(super) fn lock(l: &Lock) -> Guard<'_> {
        l.lock().expect("no consumer panicked")
    }

    /// Under loom, one tracked cell per slot (header and row together).
    pub(super) struct Slots<T, U> {
        cells: Vec<UnsafeCell<(T, Vec<U>)>>,
    }

    impl<T: Default, U: Default> Slots<T, U> {
        pub(super) fn new(n: usize, stride: usize) -> (Slots<T, U>, Lock) {
            let cells = (0..n)
                .map(|_| {
                    let row = (0..stride).map(|_| U::default()).collect();
                    UnsafeCell::new((T::default(), row))
                })
                .collect();
            (Slots { cells }, loom::sync::Mutex::new(()))
        }
    }

    impl<T, U> Slots<T, U> {
        /// Runs `f` on slot `i`; loom checks that no other access to the
        /// slot overlaps.
        ///
        /// # Safety
        /// As the kernel's: the caller has slot `i` to itself.
        pub(super) unsafe fn with<R>(&self, i: usize, f: impl FnOnce(&mut T, &mut [U]) -> R) -> R {
            self.cells[i].with_mut(|p| {
                // SAFETY: loom's cell gives exclusive access for the call.
                let s = unsafe { &mut *p };
                f(&mut s.0, &mut s.1)
            })
        }
    }
}

use imp::{AtomicBool, AtomicU64, Ordering};

/// Why [`SpscRing::produce`] stored nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every slot holds an entry not yet consumed.
    Full,
    /// Another producer is filling a slot (the ring has one producer).
    Busy,
}

/// A ring of `n` slots, each a header `T` and `stride` words `U`, with one
/// producer that never waits and consumers serialised by a spin lock (see
/// the module's documentation).
pub struct SpscRing<T, U> {
    slots: imp::Slots<T, U>,
    /// Entries it holds at most.
    n: u64,
    /// The number of slots (a power of two, at least `n`) less one.
    mask: u64,
    /// Entries published (written by the producer only).
    prod: AtomicU64,
    /// Entries given back (written by the consumers only, under `lock`).
    cons: AtomicU64,
    /// Held by the producer while it fills a slot.
    producing: AtomicBool,
    lock: imp::Lock,
}

// SAFETY: the slots are reached only through `produce` (one producer at a
// time, by the `producing` flag) and `Consumer` (one at a time, under the
// lock), on disjoint slots by the index protocol; the entries move
// between threads, hence `T: Send` and `U: Send`.
unsafe impl<T: Send, U: Send> Sync for SpscRing<T, U> {}
// SAFETY: the ring owns its entries; sending it sends them.
unsafe impl<T: Send, U: Send> Send for SpscRing<T, U> {}

impl<T, U> core::fmt::Debug for SpscRing<T, U> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SpscRing")
            .field("n", &self.n)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl<T: Default, U: Default> SpscRing<T, U> {
    /// A ring of `n` (at least 1) empty slots of `stride` words each,
    /// whose consumers' spin lock is named `name`.
    #[cfg(not(loom))]
    pub fn new(
        name: &'static core::ffi::CStr,
        n: usize,
        stride: usize,
        wait: crate::malloc::Wait,
    ) -> crate::KResult<SpscRing<T, U>> {
        if n == 0 {
            return Err(crate::errno::EINVAL);
        }
        let slots = n.checked_next_power_of_two().ok_or(crate::errno::ENOMEM)?;
        let (slots, lock) = imp::Slots::new(name, slots, stride, wait)?;
        Ok(SpscRing::from_parts(slots, lock, n))
    }

    /// A ring of `n` (at least 1) empty slots of `stride` words each.
    #[cfg(loom)]
    pub fn new(n: usize, stride: usize) -> SpscRing<T, U> {
        assert!(n > 0);
        let (slots, lock) = imp::Slots::new(n.next_power_of_two(), stride);
        SpscRing::from_parts(slots, lock, n)
    }
}

impl<T, U> SpscRing<T, U> {
    fn from_parts(slots: imp::Slots<T, U>, lock: imp::Lock, n: usize) -> SpscRing<T, U> {
        SpscRing {
            slots,
            n: n as u64,
            mask: n.next_power_of_two() as u64 - 1,
            prod: AtomicU64::new(0),
            cons: AtomicU64::new(0),
            producing: AtomicBool::new(false),
            lock,
        }
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.n as usize
    }

    /// Entries published and not yet given back, as seen now (without the
    /// lock: a snapshot).
    pub fn len(&self) -> usize {
        // cons first: it never passes prod, so the difference is never
        // negative.
        let cons = self.cons.load(Ordering::Acquire);
        let prod = self.prod.load(Ordering::Acquire);
        prod.saturating_sub(cons) as usize
    }

    /// Whether no entry is waiting, as seen now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The producer: fills the next free slot with `f` and publishes it.
    /// Refused, and `f` not called, when the ring is full or another
    /// producer is at work. Takes no lock and never waits (NMI context).
    #[inline]
    pub fn produce<R>(&self, f: impl FnOnce(&mut T, &mut [U]) -> R) -> Result<R, Refused> {
        if self.producing.swap(true, Ordering::Acquire) {
            return Err(Refused::Busy);
        }
        // Only producers store prod, and the flag orders them: Relaxed
        // sees the last one's value.
        let prod = self.prod.load(Ordering::Relaxed);
        let cons = self.cons.load(Ordering::Acquire);
        let r = if prod.wrapping_sub(cons) >= self.n {
            Err(Refused::Full)
        } else {
            let i = (prod & self.mask) as usize;
            // SAFETY: entry `prod` is not in cons..prod (the ring is not
            // full), so no consumer has slot `i`; the flag keeps other
            // producers out. The consumers' last use of the slot happened
            // before their Release store of the cons read above.
            let r = unsafe { self.slots.with(i, f) };
            self.prod.store(prod + 1, Ordering::Release);
            Ok(r)
        };
        self.producing.store(false, Ordering::Release);
        r
    }

    /// A consumer: takes the consumers' spin lock until dropped.
    pub fn consumer(&self) -> Consumer<'_, T, U> {
        let guard = imp::lock(&self.lock);
        // Only consumers store cons, under the lock just taken.
        let cons = self.cons.load(Ordering::Relaxed);
        Consumer {
            ring: self,
            cons,
            seen: core::cell::Cell::new(cons),
            _guard: guard,
        }
    }
}

/// The consumers' hold on a [`SpscRing`] (its spin lock).
pub struct Consumer<'a, T, U> {
    ring: &'a SpscRing<T, U>,
    /// `ring.cons`, which only this holder changes.
    cons: u64,
    /// `ring.prod` as last read: entries below it are published, and the
    /// consumer reads prod again only to look past it.
    seen: core::cell::Cell<u64>,
    _guard: imp::Guard<'a>,
}

impl<T, U> core::fmt::Debug for Consumer<'_, T, U> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Consumer")
            .field("cons", &self.cons)
            .field("seen", &self.seen.get())
            .finish_non_exhaustive()
    }
}

impl<T, U> Consumer<'_, T, U> {
    /// Entries published so far and not given back.
    pub fn len(&self) -> usize {
        let prod = self.ring.prod.load(Ordering::Acquire);
        self.seen.set(prod);
        (prod - self.cons) as usize
    }

    /// Whether no entry is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether entry `cons + k` is published: known from the last read of
    /// prod, or else read again.
    fn published(&self, k: u64) -> bool {
        self.cons + k < self.seen.get() || (k as usize) < self.len()
    }

    /// Runs `f` on the `k`th oldest entry (0 is the oldest), which the
    /// consumer may read and change in place; `None` when there are not
    /// that many.
    pub fn with<R>(&mut self, k: usize, f: impl FnOnce(&mut T, &mut [U]) -> R) -> Option<R> {
        if !self.published(k as u64) {
            return None;
        }
        let i = ((self.cons + k as u64) & self.ring.mask) as usize;
        // SAFETY: entry cons + k is in cons..prod: published (its writes
        // happened before the Acquire load of prod that showed it) and
        // not given back, so the producer does not touch slot `i`; the
        // lock keeps the other consumers out.
        Some(unsafe { self.ring.slots.with(i, f) })
    }

    /// Gives the oldest entry's slot back to the producer; false when
    /// there is none.
    pub fn pop(&mut self) -> bool {
        if !self.published(0) {
            return false;
        }
        self.cons += 1;
        self.ring.cons.store(self.cons, Ordering::Release);
        true
    }
}

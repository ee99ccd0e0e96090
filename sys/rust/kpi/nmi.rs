//! Values an NMI handler reads without a lock or a reference count.
//!
//! An NMI interrupts any code, spin-locked sections included, so its
//! handler can take no lock and must not drop the last reference to
//! anything. An [`NmiSlot`] belongs to one CPU and holds a reference of
//! its own to an object. It is filled and emptied on that CPU only, and
//! read on that CPU only: so the one interleaving is the handler running
//! between two instructions of the code that fills or empties it, and the
//! handler then sees the old object whole, or nothing.

// This module wraps core's atomics and the cell the handler reads.
#![allow(clippy::disallowed_types)]

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering, compiler_fence};

use crate::malloc::KArc;

/// A slot of CPU `cpu` holding a reference to a `T`, readable in NMI
/// context on that CPU.
#[derive(Debug)]
pub struct NmiSlot<T> {
    cpu: u32,
    /// The cell holds what readers may see.
    present: AtomicBool,
    /// A writer is at work (two at once on one CPU is a bug).
    writing: AtomicBool,
    cell: UnsafeCell<Option<KArc<T>>>,
}

impl<T> NmiSlot<T> {
    /// An empty slot of `cpu`.
    pub const fn new(cpu: u32) -> NmiSlot<T> {
        NmiSlot {
            cpu,
            present: AtomicBool::new(false),
            writing: AtomicBool::new(false),
            cell: UnsafeCell::new(None),
        }
    }

    #[inline]
    fn check_cpu(&self, what: &'static str) {
        let cur = crate::cpu::curcpu();
        if crate::INVARIANTS && cur != self.cpu {
            wrong_cpu(self.cpu, cur, what);
        }
    }

    /// Puts `value` in the slot (its own reference) and gives back what
    /// the slot held, for the caller to drop outside NMI context. Runs on
    /// the slot's CPU.
    #[inline]
    pub fn replace(&self, value: Option<KArc<T>>) -> Option<KArc<T>> {
        self.check_cpu("replace");
        let busy = self.writing.swap(true, Ordering::Acquire);
        crate::kassert!(!busy, "two writers of the NmiSlot of CPU {}", self.cpu);
        self.present.store(false, Ordering::SeqCst);
        compiler_fence(Ordering::SeqCst);
        let has = value.is_some();
        // SAFETY: this is the only writer (the `writing` flag), on the
        // slot's CPU; readers run on this CPU only and read the cell only
        // while `present` is set, which it is not now, and a reader that
        // interrupts this code runs to its end before it goes on.
        let old = unsafe { core::mem::replace(&mut *self.cell.get(), value) };
        compiler_fence(Ordering::SeqCst);
        self.present.store(has, Ordering::SeqCst);
        self.writing.store(false, Ordering::Release);
        old
    }

    /// Runs `f` on the reference in the slot, if there is one, taking no
    /// lock and no count: for the NMI handler of the slot's CPU.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(Option<&KArc<T>>) -> R) -> R {
        self.check_cpu("with");
        if !self.present.load(Ordering::SeqCst) {
            return f(None);
        }
        compiler_fence(Ordering::SeqCst);
        // SAFETY: `present` says the cell is whole and no writer touches
        // it until this reader, on the slot's CPU, has returned (a writer
        // on this CPU clears `present` before it writes, and a writer this
        // reader interrupted does not go on until the reader ends).
        f(unsafe { (*self.cell.get()).as_ref() })
    }
}

/// The failure of [`NmiSlot::check_cpu`], out of line: the check costs its
/// caller only the comparison.
#[cold]
#[inline(never)]
fn wrong_cpu(slot: u32, cur: u32, what: &str) -> ! {
    crate::kassert_failed(format_args!(
        "NmiSlot of CPU {slot} used ({what}) on CPU {cur}"
    ))
}

// SAFETY: the slot owns a KArc<T>, which may be sent when T is Send +
// Sync.
unsafe impl<T: Send + Sync> Send for NmiSlot<T> {}
// SAFETY: shared use goes through `replace` and `with`, which allow one
// writer and readers on the slot's CPU only, as documented there.
unsafe impl<T: Send + Sync> Sync for NmiSlot<T> {}

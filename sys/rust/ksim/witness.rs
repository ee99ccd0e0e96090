//! The lock witness: learns the order in which lock classes are taken and
//! reports reversals, and reports sleeping or allocating where FreeBSD
//! forbids it (spin lock held, interrupt context).

use std::collections::HashSet;

/// How a lock may be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// A spin mutex (`MTX_SPIN`): interrupts off, no sleeping.
    Spin,
    /// A default (sleep) mutex.
    Sleep,
    /// A shared/exclusive lock, which may sleep.
    Sx,
}

/// A rule the kernel code broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// `first` was taken while holding `second` after the opposite order
    /// was seen.
    LockOrderReversal {
        /// Lock held.
        held: &'static str,
        /// Lock taken.
        taken: &'static str,
    },
    /// A sleepable lock was taken while a spin lock was held.
    SleepLockUnderSpin {
        /// Lock taken.
        taken: &'static str,
        /// Spin lock held.
        spin: &'static str,
    },
    /// A lock already held was taken again (no recursion allowed).
    Recursion(&'static str),
    /// A lock was released that is not held.
    NotHeld(&'static str),
    /// Memory was allocated while a spin lock was held.
    AllocUnderSpin(&'static str),
    /// Memory was allocated in interrupt context.
    AllocInInterrupt,
    /// The thread slept while holding a spin lock or in interrupt context.
    SleepInAtomicContext,
    /// A sleepable lock was taken in interrupt context.
    SleepLockInInterrupt(&'static str),
    /// Locks were still held when control returned to user mode.
    LockHeldAtReturn(&'static str),
}

#[derive(Debug)]
pub(crate) struct Witness {
    pub(crate) enabled: bool,
    held: Vec<(&'static str, LockKind)>,
    /// Orders seen, as (held, taken) pairs of class names. Names are
    /// compared by address first: one class is one static string.
    order: HashSet<(usize, usize)>,
    pub(crate) violations: Vec<Violation>,
}

impl Default for Witness {
    fn default() -> Self {
        Witness::new(true)
    }
}

impl Witness {
    pub(crate) fn new(enabled: bool) -> Witness {
        Witness {
            enabled,
            held: Vec::new(),
            order: HashSet::new(),
            violations: Vec::new(),
        }
    }
}

fn key(class: &'static str) -> usize {
    class.as_ptr() as usize
}

impl Witness {
    pub(crate) fn acquire(&mut self, class: &'static str, kind: LockKind, in_intr: bool) {
        if !self.enabled {
            self.held.push((class, kind));
            return;
        }
        if self.held.iter().any(|h| h.0 == class) {
            self.violations.push(Violation::Recursion(class));
        }
        if kind != LockKind::Spin {
            if let Some(spin) = self.held.iter().find(|h| h.1 == LockKind::Spin) {
                self.violations.push(Violation::SleepLockUnderSpin {
                    taken: class,
                    spin: spin.0,
                });
            }
            if in_intr {
                self.violations.push(Violation::SleepLockInInterrupt(class));
            }
        }
        for &(h, _) in &self.held {
            if h == class {
                continue;
            }
            if self.order.contains(&(key(class), key(h))) {
                self.violations.push(Violation::LockOrderReversal {
                    held: h,
                    taken: class,
                });
            } else if !self.order.contains(&(key(h), key(class))) {
                self.order.insert((key(h), key(class)));
            }
        }
        self.held.push((class, kind));
    }

    pub(crate) fn release(&mut self, class: &'static str) {
        match self
            .held
            .iter()
            .rposition(|h| key(h.0) == key(class) || h.0 == class)
        {
            Some(i) => {
                self.held.remove(i);
            }
            None => self.violations.push(Violation::NotHeld(class)),
        }
    }

    pub(crate) fn spin_held(&self) -> Option<&'static str> {
        self.held
            .iter()
            .find(|h| h.1 == LockKind::Spin)
            .map(|h| h.0)
    }

    pub(crate) fn check_alloc(&mut self, in_intr: bool) {
        if in_intr {
            self.violations.push(Violation::AllocInInterrupt);
        } else if let Some(spin) = self.spin_held() {
            self.violations.push(Violation::AllocUnderSpin(spin));
        }
    }

    pub(crate) fn check_sleep(&mut self, in_intr: bool) {
        if in_intr || self.spin_held().is_some() {
            self.violations.push(Violation::SleepInAtomicContext);
        }
    }

    pub(crate) fn check_return(&mut self) {
        for &(h, _) in &self.held {
            self.violations.push(Violation::LockHeldAtReturn(h));
        }
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reversal_is_reported_once_the_order_is_known() {
        let mut w = Witness::default();
        w.acquire("a", LockKind::Sx, false);
        w.acquire("b", LockKind::Spin, false);
        w.release("b");
        w.release("a");
        assert!(w.violations.is_empty());
        w.acquire("b", LockKind::Spin, false);
        w.acquire("a", LockKind::Sx, false);
        assert!(w.violations.contains(&Violation::LockOrderReversal {
            held: "b",
            taken: "a"
        }));
        assert!(w.violations.contains(&Violation::SleepLockUnderSpin {
            taken: "a",
            spin: "b"
        }));
    }

    #[test]
    fn allocation_and_sleep_rules() {
        let mut w = Witness::default();
        w.check_alloc(false);
        w.check_sleep(false);
        assert!(w.violations.is_empty());
        w.acquire("s", LockKind::Spin, false);
        w.check_alloc(false);
        w.check_sleep(false);
        w.release("s");
        w.check_alloc(true);
        assert_eq!(
            w.violations,
            vec![
                Violation::AllocUnderSpin("s"),
                Violation::SleepInAtomicContext,
                Violation::AllocInInterrupt
            ]
        );
    }

    #[test]
    fn recursion_and_unbalanced_release() {
        let mut w = Witness::default();
        w.acquire("m", LockKind::Sleep, false);
        w.acquire("m", LockKind::Sleep, false);
        w.release("m");
        w.release("m");
        w.release("m");
        assert_eq!(
            w.violations,
            vec![Violation::Recursion("m"), Violation::NotHeld("m")]
        );
    }
}

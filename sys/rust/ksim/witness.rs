//! The lock witness, as strict as FreeBSD's WITNESS with INVARIANTS:
//!
//! - lock order: the order in which lock classes are taken is learned as a
//!   graph over every class (spin and default mutexes, sx); taking a lock
//!   when the graph already leads from it, directly or through other
//!   classes, to a lock held is a reversal (witness(4));
//! - malloc(9) and free(9) with a spin lock held, in a critical section or
//!   in interrupt context (kern_malloc.c asserts `td_critnest == 0`);
//! - sleeping (an `M_WAITOK` allocation, an sx lock, a sleep or a wait)
//!   with a default mutex or a spin lock held, in a critical section or in
//!   interrupt context (`WITNESS_WARN(WARN_SLEEPOK)`, mutex(9): "sleeping
//!   while holding a mutex is not allowed");
//! - a sleepable lock (sx) taken with a mutex held, and a default mutex
//!   taken under a spin lock, in a critical section or in an interrupt
//!   filter (locking(9)'s table of what may be held under what);
//! - any lock at all in NMI context;
//! - recursion, releases of locks not held, locks held at the return to
//!   user mode.

use std::collections::{HashMap, HashSet};

/// How a lock may be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// A spin mutex (`MTX_SPIN`): interrupts off, no sleeping.
    Spin,
    /// A default (sleep) mutex: may block, but nothing may sleep with it
    /// held.
    Sleep,
    /// A shared/exclusive lock, which may sleep.
    Sx,
}

/// Where the kernel code runs when it asks the witness.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Context {
    /// In an interrupt filter (hardclock and the soft events it fires).
    pub intr: bool,
    /// In a non-maskable interrupt (the PMC interrupt on x86).
    pub nmi: bool,
    /// `td_critnest`: critical sections entered (scheduler hooks run in
    /// one, with the thread lock held).
    pub critnest: u32,
}

impl Context {
    fn atomic(&self) -> bool {
        self.intr || self.nmi || self.critnest > 0
    }
}

/// A rule the kernel code broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// `taken` was taken while `held` was held, after the graph of orders
    /// seen already led from `taken` to `held`.
    LockOrderReversal {
        /// Lock held.
        held: &'static str,
        /// Lock taken.
        taken: &'static str,
    },
    /// A default mutex or sx lock was taken while a spin lock was held.
    SleepLockUnderSpin {
        /// Lock taken.
        taken: &'static str,
        /// Spin lock held.
        spin: &'static str,
    },
    /// An sx lock was taken while a default mutex was held.
    SleepableUnderMutex {
        /// Lock taken.
        taken: &'static str,
        /// Mutex held.
        mutex: &'static str,
    },
    /// A lock already held was taken again (no recursion allowed).
    Recursion(&'static str),
    /// A lock was released that is not held.
    NotHeld(&'static str),
    /// Memory was allocated while a spin lock was held.
    AllocUnderSpin(&'static str),
    /// Memory was allocated in a critical section.
    AllocInCriticalSection,
    /// Memory was allocated in interrupt or NMI context.
    AllocInInterrupt,
    /// Memory was freed while a spin lock was held.
    FreeUnderSpin(&'static str),
    /// Memory was freed in a critical section.
    FreeInCriticalSection,
    /// Memory was freed in interrupt or NMI context.
    FreeInInterrupt,
    /// The thread may have slept while holding a spin lock, in a critical
    /// section or in interrupt context.
    SleepInAtomicContext,
    /// The thread may have slept while holding a default mutex.
    SleepWithMutexHeld(&'static str),
    /// A default mutex or sx lock was taken in interrupt context or in a
    /// critical section.
    SleepLockInInterrupt(&'static str),
    /// A lock was taken in NMI context.
    LockInNmi(&'static str),
    /// Locks were still held when control returned to user mode.
    LockHeldAtReturn(&'static str),
}

#[derive(Debug)]
pub(crate) struct Witness {
    pub(crate) enabled: bool,
    held: Vec<(&'static str, LockKind)>,
    /// Orders seen: for each class, the classes taken while it was held.
    /// Classes are known by name, as WITNESS enrols them.
    order: HashMap<&'static str, HashSet<&'static str>>,
    pub(crate) violations: Vec<Violation>,
    /// Acquisitions per class, checked or not (tests count the locks a
    /// path takes).
    pub(crate) acquired: HashMap<&'static str, u64>,
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
            order: HashMap::new(),
            violations: Vec::new(),
            acquired: HashMap::new(),
        }
    }

    /// Records a violation; with `KSIM_WITNESS_PANIC` set in the
    /// environment, panics there instead, so that the backtrace shows the
    /// kernel code that broke the rule.
    fn report(&mut self, v: Violation) {
        if std::env::var_os("KSIM_WITNESS_PANIC").is_some() {
            panic!("witness: {v:?}");
        }
        self.violations.push(v);
    }

    fn holding(&self, kind: LockKind) -> Option<&'static str> {
        self.held.iter().find(|h| h.1 == kind).map(|h| h.0)
    }

    /// Whether the order graph leads from `from` to `to`.
    fn reaches(&self, from: &'static str, to: &'static str) -> bool {
        let mut seen = HashSet::new();
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            if n == to {
                return true;
            }
            if seen.insert(n) {
                if let Some(next) = self.order.get(&n) {
                    stack.extend(next.iter().copied());
                }
            }
        }
        false
    }

    pub(crate) fn acquire(&mut self, class: &'static str, kind: LockKind, ctx: Context) {
        *self.acquired.entry(class).or_default() += 1;
        if !self.enabled {
            self.held.push((class, kind));
            return;
        }
        if ctx.nmi {
            self.report(Violation::LockInNmi(class));
        }
        if self.held.iter().any(|h| h.0 == class) {
            self.report(Violation::Recursion(class));
        }
        if kind != LockKind::Spin {
            if let Some(spin) = self.holding(LockKind::Spin) {
                self.report(Violation::SleepLockUnderSpin { taken: class, spin });
            } else if ctx.intr || ctx.critnest > 0 {
                self.report(Violation::SleepLockInInterrupt(class));
            }
        }
        if kind == LockKind::Sx {
            if let Some(mutex) = self.holding(LockKind::Sleep) {
                self.report(Violation::SleepableUnderMutex {
                    taken: class,
                    mutex,
                });
            }
        }
        for i in 0..self.held.len() {
            let h = self.held[i].0;
            if h == class {
                continue;
            }
            if self.reaches(class, h) {
                self.report(Violation::LockOrderReversal {
                    held: h,
                    taken: class,
                });
            } else {
                self.order.entry(h).or_default().insert(class);
            }
        }
        self.held.push((class, kind));
    }

    pub(crate) fn release(&mut self, class: &'static str) {
        match self.held.iter().rposition(|h| h.0 == class) {
            Some(i) => {
                self.held.remove(i);
            }
            None => self.report(Violation::NotHeld(class)),
        }
    }

    /// malloc(9); `wait` for `M_WAITOK`, which may also sleep.
    pub(crate) fn check_alloc(&mut self, wait: bool, ctx: Context) {
        if !self.enabled {
            return;
        }
        if ctx.intr || ctx.nmi {
            self.report(Violation::AllocInInterrupt);
        } else if let Some(spin) = self.holding(LockKind::Spin) {
            self.report(Violation::AllocUnderSpin(spin));
        } else if ctx.critnest > 0 {
            self.report(Violation::AllocInCriticalSection);
        } else if wait {
            self.check_sleep(ctx);
        }
    }

    /// free(9).
    pub(crate) fn check_free(&mut self, ctx: Context) {
        if !self.enabled {
            return;
        }
        if ctx.intr || ctx.nmi {
            self.report(Violation::FreeInInterrupt);
        } else if let Some(spin) = self.holding(LockKind::Spin) {
            self.report(Violation::FreeUnderSpin(spin));
        } else if ctx.critnest > 0 {
            self.report(Violation::FreeInCriticalSection);
        }
    }

    /// A point where the thread may sleep.
    pub(crate) fn check_sleep(&mut self, ctx: Context) {
        if !self.enabled {
            return;
        }
        if ctx.atomic() || self.holding(LockKind::Spin).is_some() {
            self.report(Violation::SleepInAtomicContext);
        } else if let Some(mutex) = self.holding(LockKind::Sleep) {
            self.report(Violation::SleepWithMutexHeld(mutex));
        }
    }

    /// The locks held by the code running now, taken away (the machine
    /// changes hands between concurrent pieces of kernel work).
    pub(crate) fn take_held(&mut self) -> Vec<(&'static str, LockKind)> {
        std::mem::take(&mut self.held)
    }

    /// The locks held by the code that runs next.
    pub(crate) fn put_held(&mut self, held: Vec<(&'static str, LockKind)>) {
        self.held = held;
    }

    pub(crate) fn check_return(&mut self) {
        for (h, _) in std::mem::take(&mut self.held) {
            self.report(Violation::LockHeldAtReturn(h));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREAD: Context = Context {
        intr: false,
        nmi: false,
        critnest: 0,
    };

    #[test]
    fn reversal_is_reported_once_the_order_is_known() {
        let mut w = Witness::default();
        w.acquire("a", LockKind::Sx, THREAD);
        w.acquire("b", LockKind::Spin, THREAD);
        w.release("b");
        w.release("a");
        assert!(w.violations.is_empty());
        w.acquire("b", LockKind::Spin, THREAD);
        w.acquire("a", LockKind::Sx, THREAD);
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
    fn reversal_through_a_third_class_and_across_kinds() {
        let mut w = Witness::default();
        // sx a, then mutex b; mutex b, then spin c.
        w.acquire("a", LockKind::Sx, THREAD);
        w.acquire("b", LockKind::Sleep, THREAD);
        w.release("b");
        w.release("a");
        w.acquire("b", LockKind::Sleep, THREAD);
        w.acquire("c", LockKind::Spin, THREAD);
        w.release("c");
        w.release("b");
        assert!(w.violations.is_empty());
        // c then a closes the cycle a -> b -> c -> a.
        w.acquire("c", LockKind::Spin, THREAD);
        w.release("c");
        w.acquire("c2", LockKind::Sleep, THREAD);
        w.acquire("a", LockKind::Sx, THREAD);
        w.release("a");
        w.release("c2");
        assert!(w.violations.contains(&Violation::SleepableUnderMutex {
            taken: "a",
            mutex: "c2"
        }));
        let mut w = Witness::default();
        for (h, t) in [("a", "b"), ("b", "c")] {
            w.acquire(h, LockKind::Sleep, THREAD);
            w.acquire(t, LockKind::Sleep, THREAD);
            w.release(t);
            w.release(h);
        }
        w.acquire("c", LockKind::Sleep, THREAD);
        w.acquire("a", LockKind::Sleep, THREAD);
        assert_eq!(
            w.violations,
            vec![Violation::LockOrderReversal {
                held: "c",
                taken: "a"
            }]
        );
    }

    #[test]
    fn allocation_free_and_sleep_rules() {
        let mut w = Witness::default();
        w.check_alloc(true, THREAD);
        w.check_free(THREAD);
        w.check_sleep(THREAD);
        assert!(w.violations.is_empty());
        w.acquire("s", LockKind::Spin, THREAD);
        // Even M_NOWAIT is forbidden under a spin lock, and so is free.
        w.check_alloc(false, THREAD);
        w.check_free(THREAD);
        w.check_sleep(THREAD);
        w.release("s");
        w.check_alloc(
            false,
            Context {
                intr: true,
                ..THREAD
            },
        );
        w.check_free(Context {
            critnest: 1,
            ..THREAD
        });
        w.check_alloc(
            false,
            Context {
                critnest: 1,
                ..THREAD
            },
        );
        w.acquire("m", LockKind::Sleep, THREAD);
        w.check_alloc(false, THREAD);
        w.check_alloc(true, THREAD);
        w.release("m");
        assert_eq!(
            w.violations,
            vec![
                Violation::AllocUnderSpin("s"),
                Violation::FreeUnderSpin("s"),
                Violation::SleepInAtomicContext,
                Violation::AllocInInterrupt,
                Violation::FreeInCriticalSection,
                Violation::AllocInCriticalSection,
                Violation::SleepWithMutexHeld("m"),
            ]
        );
    }

    #[test]
    fn no_lock_at_all_in_nmi_context() {
        let mut w = Witness::default();
        let nmi = Context {
            nmi: true,
            ..THREAD
        };
        w.acquire("spin", LockKind::Spin, nmi);
        w.release("spin");
        assert_eq!(w.violations, vec![Violation::LockInNmi("spin")]);
        // Every kind of lock, whatever else its kind forbids there.
        let mut w = Witness::default();
        for (class, kind) in [("mtx", LockKind::Sleep), ("sx", LockKind::Sx)] {
            w.acquire(class, kind, nmi);
            w.release(class);
        }
        assert_eq!(
            w.violations,
            vec![Violation::LockInNmi("mtx"), Violation::LockInNmi("sx")]
        );
        // Outside the NMI, the same lock is fine.
        w.acquire("spin", LockKind::Spin, THREAD);
        w.release("spin");
        assert_eq!(w.violations.len(), 2, "not in an NMI: {:?}", w.violations);
    }

    #[test]
    fn recursion_and_unbalanced_release() {
        let mut w = Witness::default();
        w.acquire("m", LockKind::Sleep, THREAD);
        w.acquire("m", LockKind::Sleep, THREAD);
        w.release("m");
        w.release("m");
        w.release("m");
        assert_eq!(
            w.violations,
            vec![Violation::Recursion("m"), Violation::NotHeld("m")]
        );
    }
}

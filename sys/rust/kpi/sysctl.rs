//! sysctl(9): the oids a module declares, loader tunables, and counter(9).
//!
//! A module's oids are those FreeBSD's C code declares statically
//! (`SYSCTL_INT`, `SYSCTL_COUNTER_U64`, `SYSCTL_PROC`, ...), with their
//! types, access flags and defaults. On FreeBSD they are declared in the
//! module's C glue, which lists their variables in `kpi_module_knobs`,
//! and the kernel registers them when the module is linked in, loading
//! `CTLFLAG_TUN` ones from the environment; [`SysctlSet::declare`] checks
//! that the glue declares each oid the driver names. The simulator
//! declares them in its sysctl tree from the same table.

use crate::KResult;
use crate::malloc::{KBox, KVec};

pub use uapi::sysctl::{
    CTLFLAG_MPSAFE, CTLFLAG_NOFETCH, CTLFLAG_RD, CTLFLAG_RDTUN, CTLFLAG_RW, CTLFLAG_RWTUN,
    CTLFLAG_STATS, CTLFLAG_TUN, CTLFLAG_WR, SysctlType,
};

/// One oid a module declares: `SYSCTL_INT(parent, OID_AUTO, leaf, flags,
/// &var, 0, descr)` with `static int var = default;` is
/// `{ name: "parent.leaf", kind: Int, flags, default }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysctlDecl {
    /// The full name, e.g. `kern.hwpmc.hashsize`.
    pub name: &'static str,
    /// The type.
    pub kind: SysctlType,
    /// The `CTLFLAG_*` access flags as declared (the macro's own
    /// `CTLFLAG_MPSAFE` and `CTLFLAG_STATS` included).
    pub flags: u32,
    /// The value before any tunable (integers and counters; strings
    /// start empty).
    pub default: i64,
}

/// A module's oids, declared while this lives.
#[derive(Debug)]
pub struct SysctlSet {
    decls: &'static [SysctlDecl],
}

impl SysctlSet {
    /// Declares `decls` (kldload's registration of the module's oids):
    /// ENOENT, with a console line naming it, when the FreeBSD glue does
    /// not declare one of them with that type.
    pub fn declare(decls: &'static [SysctlDecl]) -> KResult<SysctlSet> {
        for (i, d) in decls.iter().enumerate() {
            if let Err(e) = crate::backend::sysctl_declare(d) {
                for undo in decls[..i].iter().rev() {
                    crate::backend::sysctl_undeclare(undo);
                }
                return Err(e);
            }
        }
        Ok(SysctlSet { decls })
    }
}

impl Drop for SysctlSet {
    fn drop(&mut self) {
        for d in self.decls.iter().rev() {
            crate::backend::sysctl_undeclare(d);
        }
    }
}

/// A declared `int` oid: the module's variable, which sysctl(8) reads
/// and, for a writable one, sets.
#[derive(Debug)]
pub struct IntKnob {
    handle: crate::backend::IntHandle,
}

impl IntKnob {
    /// The declared int oid `name`; ENOENT if none.
    pub fn find(name: &str) -> KResult<IntKnob> {
        Ok(IntKnob {
            handle: crate::backend::int_knob(name)?,
        })
    }
    /// The current value (as written by sysctl(8) too).
    pub fn get(&self) -> i64 {
        crate::backend::int_knob_get(&self.handle)
    }
    /// Sets the value (the module's own update, e.g. a tunable reset to
    /// its default), cut to an `int`.
    pub fn set(&self, value: i64) {
        let v = value.clamp(i32::MIN.into(), i32::MAX.into());
        crate::backend::int_knob_set(&self.handle, v);
    }
}

/// A counter(9) behind a declared `SYSCTL_COUNTER_U64` oid, allocated
/// (`counter_u64_alloc`) while this lives. Adding is cheap and safe in
/// any context, interrupts included.
#[derive(Debug)]
pub struct Counter {
    handle: crate::backend::CounterHandle,
}

impl Counter {
    /// Allocates the counter of the declared counter oid `name`; ENOENT
    /// if none.
    pub fn attach(name: &str) -> KResult<Counter> {
        Ok(Counter {
            handle: crate::backend::counter_attach(name)?,
        })
    }
    /// `counter_u64_add`.
    pub fn add(&self, n: u64) {
        crate::backend::counter_add(&self.handle, n);
    }
    /// `counter_u64_fetch`: the sum over the CPUs.
    pub fn fetch(&self) -> u64 {
        crate::backend::counter_fetch(&self.handle)
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        crate::backend::counter_detach(&self.handle);
    }
}

/// A loader tunable string, if set (`TUNABLE_STR_FETCH`).
pub fn tunable_str(name: &str, wait: crate::malloc::Wait) -> KResult<Option<KVec<u8>>> {
    crate::backend::kenv_str(name, wait)
}

/// A declared writable string oid whose handler validates and applies
/// new values (`SYSCTL_PROC` with `CTLTYPE_STRING`); the handler is
/// detached when this is dropped.
#[derive(Debug)]
pub struct StrKnob {
    name: &'static str,
}

/// The handler of a [`StrKnob`].
pub type StrHandler = KBox<dyn Fn(&str) -> crate::KResult<()> + Send + Sync>;

impl StrKnob {
    /// Attaches `handler` to the declared string oid `name`, whose value
    /// becomes `value`; `handler` is called for each write.
    pub fn new(name: &'static str, value: &str, handler: StrHandler) -> KResult<StrKnob> {
        crate::backend::sysctl_str_register(name, value, handler)?;
        Ok(StrKnob { name })
    }
}

impl Drop for StrKnob {
    fn drop(&mut self) {
        crate::backend::sysctl_str_remove(self.name);
    }
}

/// `CTR*`: writes a ktr(4) trace entry.
pub fn ktr(line: &str) {
    crate::backend::ktr(line);
}

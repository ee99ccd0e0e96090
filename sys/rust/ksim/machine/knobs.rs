//! The kernel environment and sysctls, and what tests may read of the
//! machine: the console, signals, the witness, the allocation ledger and
//! fault injection, soft events, clocks, system calls and kernel processes.
//!
//! The sysctl tree is a model of FreeBSD's: each oid has a type, the
//! access flags it was declared with (`CTLFLAG_*`) and a value. Kernel
//! code declares its oids (`SYSCTL_INT`, `SYSCTL_COUNTER_U64`, ...) with
//! [`crate::kern::sysctl_declare`]; a `CTLFLAG_TUN` oid takes the loader
//! tunable of its name when declared, parsed as the kernel parses it;
//! sysctl(8) ([`Machine::sysctl_write`]) may write only oids declared
//! with `CTLFLAG_WR`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::*;

/// `CTLFLAG_*` of sys/sysctl.h, by their short names.
pub mod ctlflag {
    pub use uapi::sysctl::{
        CTLFLAG_MPSAFE as MPSAFE, CTLFLAG_NOFETCH as NOFETCH, CTLFLAG_RD as RD,
        CTLFLAG_RDTUN as RDTUN, CTLFLAG_RW as RW, CTLFLAG_RWTUN as RWTUN, CTLFLAG_STATS as STATS,
        CTLFLAG_TUN as TUN, CTLFLAG_WR as WR,
    };
}

pub use uapi::sysctl::SysctlType;

/// The value of an oid, as sysctl(8) would print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SysctlValue {
    /// A node.
    Node,
    /// An integer or a counter.
    Int(i64),
    /// A string.
    Str(String),
}

/// What sysctl(8) sees of an oid: its type, access flags and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysctlInfo {
    /// The type.
    pub kind: SysctlType,
    /// The `CTLFLAG_*` bits it was declared with.
    pub flags: u32,
    /// The current value.
    pub value: SysctlValue,
}

/// Where an oid keeps its value. Integers and counters are shared with the
/// kernel code that declared them, which reads and updates them without
/// the machine's state (as C code reads its variables).
#[derive(Debug, Clone)]
pub(crate) enum SysctlCell {
    Node,
    Int(Arc<AtomicI64>),
    Counter(Arc<AtomicU64>),
    Str(String),
}

/// An oid of the tree.
#[derive(Debug, Clone)]
pub(crate) struct Sysctl {
    pub(crate) kind: SysctlType,
    pub(crate) flags: u32,
    pub(crate) cell: SysctlCell,
}

impl Sysctl {
    fn info(&self) -> SysctlInfo {
        let value = match &self.cell {
            SysctlCell::Node => SysctlValue::Node,
            SysctlCell::Int(v) => SysctlValue::Int(v.load(Ordering::Relaxed)),
            SysctlCell::Counter(v) => SysctlValue::Int(v.load(Ordering::Relaxed) as i64),
            SysctlCell::Str(v) => SysctlValue::Str(v.clone()),
        };
        SysctlInfo {
            kind: self.kind,
            flags: self.flags,
            value,
        }
    }
}

/// The oids the kernel itself declares: `kern.hwpmc` and
/// `kern.hwpmc.softevents` (kern_pmc.c, in kernels with `options
/// HWPMC_HOOKS`) and `security.bsd.unprivileged_proc_debug`.
pub(crate) fn kernel_sysctls(hwpmc_hooks: bool) -> BTreeMap<String, Sysctl> {
    let int = |flags: u32, v: i64| Sysctl {
        kind: SysctlType::Int,
        flags,
        cell: SysctlCell::Int(Arc::new(AtomicI64::new(v))),
    };
    let mut t = BTreeMap::new();
    t.insert(
        "security.bsd.unprivileged_proc_debug".into(),
        int(ctlflag::RWTUN | ctlflag::MPSAFE, 1),
    );
    if hwpmc_hooks {
        t.insert(
            "kern.hwpmc".into(),
            Sysctl {
                kind: SysctlType::Node,
                flags: ctlflag::RW | ctlflag::MPSAFE,
                cell: SysctlCell::Node,
            },
        );
        t.insert(
            "kern.hwpmc.softevents".into(),
            int(ctlflag::RDTUN | ctlflag::MPSAFE, 16),
        );
    }
    t
}

/// The value of loader tunable `text` for an oid of type `kind`, as
/// getenv_array() reads it: numbers in C notation (`strtoq` base 0) with
/// an optional k, m, g or t suffix, separated by spaces, tabs or commas,
/// the first of which the oid takes; nothing when any is malformed or out
/// of the type's range.
pub(crate) fn parse_tunable(text: &str, kind: SysctlType) -> Option<i64> {
    let mut values = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (v, after) = strtoq(rest)?;
        let (shift, after) = match after.as_bytes().first() {
            Some(b't' | b'T') => (40, &after[1..]),
            Some(b'g' | b'G') => (30, &after[1..]),
            Some(b'm' | b'M') => (20, &after[1..]),
            Some(b'k' | b'K') => (10, &after[1..]),
            Some(b' ' | b'\t' | b',') | None => (0, after),
            Some(_) => return None,
        };
        let shifted = v.checked_shl(shift)?;
        if shifted >> shift != v {
            return None;
        }
        let fits = match kind {
            SysctlType::Int => i32::try_from(shifted).is_ok(),
            SysctlType::Counter => true,
            SysctlType::Node | SysctlType::String => false,
        };
        if !fits {
            return None;
        }
        values.push(shifted);
        rest = after.trim_start_matches([' ', '\t', ',']);
    }
    values.first().copied()
}

/// strtoq(3) with base 0 at the start of `s`: the value and the rest, or
/// nothing when no digit was read. Overflow saturates, as strtoq's does.
fn strtoq(s: &str) -> Option<(i64, &str)> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (radix, digits) = if (t.starts_with("0x") || t.starts_with("0X"))
        && t[2..].starts_with(|c: char| c.is_ascii_hexdigit())
    {
        (16, &t[2..])
    } else if t.starts_with('0') {
        (8, t)
    } else {
        (10, t)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    let mag = i128::from_str_radix(&digits[..end], radix).unwrap_or(i128::MAX);
    let v = if neg { -mag } else { mag };
    let v = v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
    Some((v, &digits[end..]))
}

impl Machine {
    /// Sets a kernel environment variable (a loader tunable).
    pub fn kenv_set(&self, name: &str, value: &str) {
        self.st().kenv.insert(name.into(), value.into());
    }

    /// sysctl(8) writing an integer (or counter) oid: EPERM for one not
    /// declared writable, ENOENT for no such oid, EISDIR for a node,
    /// EINVAL for a value the type cannot hold. A counter is zeroed
    /// whatever the value.
    pub fn sysctl_write(&self, name: &str, value: i64) -> Result<(), i32> {
        const ENOENT: i32 = 2;
        const EPERM: i32 = 1;
        const EISDIR: i32 = 21;
        const EINVAL: i32 = 22;
        let st = self.0.st();
        let o = st.sysctl.get(name).ok_or(ENOENT)?;
        if o.kind == SysctlType::Node {
            return Err(EISDIR);
        }
        if o.flags & ctlflag::WR == 0 {
            return Err(EPERM);
        }
        match &o.cell {
            SysctlCell::Int(v) => {
                let value = i32::try_from(value).map_err(|_| EINVAL)?;
                v.store(value.into(), Ordering::Relaxed);
            }
            SysctlCell::Counter(v) => v.store(0, Ordering::Relaxed),
            SysctlCell::Str(_) | SysctlCell::Node => return Err(EINVAL),
        }
        Ok(())
    }

    /// [`Machine::sysctl_write`] that must succeed (a test's setting).
    pub fn sysctl_set(&self, name: &str, value: i64) {
        if let Err(e) = self.sysctl_write(name, value) {
            panic!("sysctl {name}={value}: errno {e}");
        }
    }

    /// sysctl(8) writing a string oid: its handler validates the value
    /// (an errno for a bad one) and the value is kept. EPERM for an oid not
    /// declared writable.
    pub fn sysctl_write_str(&self, name: &str, value: &str) -> Result<(), i32> {
        const ENOENT: i32 = 2;
        const EPERM: i32 = 1;
        const EINVAL: i32 = 22;
        match self.0.st().sysctl.get(name) {
            None => return Err(ENOENT),
            Some(o) if o.kind != SysctlType::String => return Err(EINVAL),
            Some(o) if o.flags & ctlflag::WR == 0 => return Err(EPERM),
            Some(_) => {}
        }
        let handler = self.0.handlers().sysctl_str.get(name).cloned();
        if let Some(handler) = handler {
            let (_, tid) = self.spawn(Cred::root(), "sysctl");
            self.in_thread(tid, || handler(value))?;
        }
        if let Some(o) = self.st().sysctl.get_mut(name) {
            o.cell = SysctlCell::Str(value.into());
        }
        Ok(())
    }

    /// Reads a string oid.
    pub fn sysctl_str(&self, name: &str) -> Option<String> {
        match &self.0.st().sysctl.get(name)?.cell {
            SysctlCell::Str(v) => Some(v.clone()),
            _ => None,
        }
    }

    /// Reads an integer or counter oid.
    pub fn sysctl_get(&self, name: &str) -> Option<i64> {
        match self.0.st().sysctl.get(name)?.info().value {
            SysctlValue::Int(v) => Some(v),
            _ => None,
        }
    }

    /// An oid's type, access flags and value.
    pub fn sysctl_info(&self, name: &str) -> Option<SysctlInfo> {
        self.0.st().sysctl.get(name).map(Sysctl::info)
    }

    /// The oids under `prefix` (the node itself included), by name.
    pub fn sysctl_list(&self, prefix: &str) -> Vec<(String, SysctlInfo)> {
        let st = self.0.st();
        let below = format!("{prefix}.");
        st.sysctl
            .iter()
            .filter(|(n, _)| *n == prefix || n.starts_with(&below))
            .map(|(n, o)| (n.clone(), o.info()))
            .collect()
    }

    /// `pmc_ss_count`: the kernel's count of owners of running system-wide
    /// sampling PMCs.
    pub fn pmc_ss_count(&self) -> i32 {
        self.0.st().pmc_ss_count
    }

    /// The ktr(4) trace buffer.
    pub fn ktr(&self) -> Vec<String> {
        self.0.st().ktr.clone()
    }

    /// Lines the kernel printed.
    pub fn console(&self) -> Vec<String> {
        self.0.st().console.clone()
    }

    /// Signals sent, as (pid, signal), in order.
    pub fn signals(&self) -> Vec<(u32, i32)> {
        self.0.st().signals.clone()
    }

    /// Rule violations the witness saw.
    pub fn violations(&self) -> Vec<Violation> {
        self.0.st().witness.violations.clone()
    }

    /// Kernel allocations still live, and their bytes.
    pub fn kmem_live(&self) -> (usize, usize) {
        let st = self.0.st();
        (st.kmem.live.len(), st.kmem.live.values().sum())
    }

    /// Lock acquisitions so far, per lock class (the driver's kpi locks
    /// and the kernel's own that the simulator models, such as
    /// `pmc-softs`), whether or not the witness checks them.
    pub fn lock_acquisitions(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.0
            .st()
            .witness
            .acquired
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }

    /// Kernel allocation calls so far.
    pub fn kmem_calls(&self) -> u64 {
        self.0.st().kmem.calls
    }

    /// Makes the `n`th kernel allocation from now (1 = the next) fail.
    pub fn fail_alloc_in(&self, n: u64) {
        let mut st = self.st();
        st.kmem.fail_at = Some(st.kmem.calls + n);
    }

    /// Stops failing allocations.
    pub fn clear_alloc_failure(&self) {
        self.st().kmem.fail_at = None;
    }

    /// The software events and their users.
    pub fn soft_events(&self) -> Vec<SoftEvent> {
        self.0.st().soft_events.clone()
    }

    /// The TSC of `cpu`.
    pub fn tsc(&self, cpu: u32) -> u64 {
        self.0.st().cpus[cpu as usize].tsc
    }

    /// Registered system call numbers.
    pub fn syscalls(&self) -> Vec<u32> {
        self.0.handlers().syscalls.keys().copied().collect()
    }

    /// Kernel processes alive, by name.
    pub fn kprocs(&self) -> Vec<String> {
        let st = self.0.st();
        st.kprocs
            .values()
            .filter_map(|k| st.procs.get(&k.pid).map(|p| p.info.comm.clone()))
            .collect()
    }
}

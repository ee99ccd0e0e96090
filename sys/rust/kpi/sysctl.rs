//! sysctl(9) integers and loader tunables (`TUNABLE_INT_FETCH`).

use crate::KResult;
use crate::malloc::{KBox, KVec, Wait};

/// A loader tunable from the kernel environment, if set and numeric.
pub fn tunable_int(name: &str) -> Option<i64> {
    crate::backend::kenv_int(name)
}

/// A loader tunable string, if set.
pub fn tunable_str(name: &str, wait: Wait) -> KResult<Option<KVec<u8>>> {
    crate::backend::kenv_str(name, wait)
}

/// An integer sysctl defined by the kernel (e.g.
/// `security.bsd.unprivileged_syspmcs`), read now.
pub fn kernel_int(name: &str) -> Option<i64> {
    crate::backend::sysctl_int(name)
}

/// An integer sysctl owned by a module: created by [`IntKnob::new`],
/// removed when dropped. Read-write knobs are read back on every
/// [`IntKnob::get`], so a change by sysctl(8) takes effect.
#[derive(Debug)]
pub struct IntKnob {
    name: &'static str,
}

impl IntKnob {
    /// Publishes `name` with `value`.
    pub fn new(name: &'static str, value: i64) -> IntKnob {
        crate::backend::sysctl_publish(name, value);
        IntKnob { name }
    }
    /// The current value.
    pub fn get(&self) -> i64 {
        crate::backend::sysctl_int(self.name).unwrap_or(0)
    }
    /// Sets the value (the module's own update, e.g. a statistic).
    pub fn set(&self, value: i64) {
        crate::backend::sysctl_publish(self.name, value);
    }
    /// The sysctl name.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl Drop for IntKnob {
    fn drop(&mut self) {
        crate::backend::sysctl_remove(self.name);
    }
}

/// A writable string sysctl whose handler validates and applies new
/// values (`SYSCTL_PROC` with `CTLTYPE_STRING`); removed when dropped.
#[derive(Debug)]
pub struct StrKnob {
    name: &'static str,
}

/// The handler of a [`StrKnob`].
pub type StrHandler = KBox<dyn Fn(&str) -> crate::KResult<()> + Send + Sync>;

impl StrKnob {
    /// Publishes `name` with `value`; `handler` is called for each write.
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

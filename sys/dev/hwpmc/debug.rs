//! Trace points of the driver (HWPMC_DEBUG): `kern.hwpmc.debugflags`
//! selects, per major group, which minor events are written to ktr(4).
//! The value is a space-separated list of `major=minor,minor,...`
//! specifiers, with `*` for every minor of a group; the empty string turns
//! tracing off.

use kpi::atomic::{AtomicU32, Ordering};

use kpi::errno::{EINVAL, KResult};

/// The major groups, in the order of their masks.
pub(crate) const MAJORS: [&str; 9] = [
    "cpu", "csw", "logging", "md", "module", "owner", "pmc", "process", "sampling",
];

/// The minor events, bit `i` of a group's mask being `MINORS[i]`.
pub(crate) const MINORS: [&str; 32] = [
    "allocaterow",
    "allocate",
    "attach",
    "bind",
    "config",
    "exec",
    "exit",
    "find",
    "flush",
    "fork",
    "getbuf",
    "hook",
    "init",
    "intr",
    "linktarget",
    "mayberemove",
    "ops",
    "read",
    "register",
    "release",
    "remove",
    "sample",
    "scheduleio",
    "select",
    "signal",
    "swi",
    "swo",
    "start",
    "stop",
    "syscall",
    "unlinktarget",
    "write",
];

const fn index_of(list: &[&str], name: &str) -> usize {
    let mut i = 0;
    while i < list.len() {
        let (a, b) = (list[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i;
            }
        }
        i += 1;
    }
    panic!("unknown debug flag name");
}

/// The mask index of a major group (checked at compile time in `pmcdbg!`).
pub(crate) const fn major(name: &str) -> usize {
    index_of(&MAJORS, name)
}

/// The bit of a minor event (checked at compile time in `pmcdbg!`).
pub(crate) const fn minor(name: &str) -> u32 {
    1 << index_of(&MINORS, name)
}

/// The enabled minors of each major group.
#[derive(Debug, Default)]
pub(crate) struct DebugFlags {
    masks: [AtomicU32; 9],
}

impl DebugFlags {
    /// Parses and applies a `kern.hwpmc.debugflags` value; EINVAL for an
    /// unknown group or event, leaving the flags as they were.
    pub fn set(&self, value: &str) -> KResult<()> {
        let mut masks = [0u32; 9];
        for spec in value.split_whitespace() {
            let (maj, mins) = spec.split_once('=').ok_or(EINVAL)?;
            let m = MAJORS.iter().position(|x| *x == maj).ok_or(EINVAL)?;
            for min in mins.split(',') {
                if min == "*" {
                    masks[m] = u32::MAX;
                } else {
                    let i = MINORS.iter().position(|x| *x == min).ok_or(EINVAL)?;
                    masks[m] |= 1 << i;
                }
            }
        }
        for (slot, m) in self.masks.iter().zip(masks) {
            slot.store(m, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Whether `major`'s event `bit` is traced.
    pub fn enabled(&self, major: usize, bit: u32) -> bool {
        // The trace points' test: a quiet load, so that they add no
        // scheduling point to the paths they trace.
        self.masks[major].load_quiet() & bit != 0
    }
}

/// One trace line: a fixed buffer, so tracing never allocates (trace
/// points run in interrupt context too).
pub(crate) type Line = kpi::LineBuf<160>;

/// Writes one trace line to ktr(4). Out of line and cold: the trace
/// points sit on the hot paths (the context switch's), which then keep
/// only the flag test, not the line's buffer and formatting.
#[cold]
#[inline(never)]
pub(crate) fn trace(major: &str, minor: &str, args: core::fmt::Arguments<'_>) {
    use core::fmt::Write;
    let mut line = Line::new();
    let _ = write!(line, "{major}:{minor}: ");
    let _ = line.write_fmt(args);
    kpi::sysctl::ktr(line.as_str());
}

/// `PMCDBG`: a trace entry for `major`/`minor` when enabled.
macro_rules! pmcdbg {
    ($flags:expr, $major:literal, $minor:literal, $($fmt:tt)+) => {{
        const MAJOR: usize = $crate::debug::major($major);
        const MINOR: u32 = $crate::debug::minor($minor);
        if $flags.enabled(MAJOR, MINOR) {
            $crate::debug::trace($major, $minor, format_args!($($fmt)+));
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn parses_the_hwpmc4_examples_and_rejects_unknown_names() {
        let f = DebugFlags::default();
        f.set("pmc=allocate,release md=allocate,release").unwrap();
        assert!(f.enabled(major("pmc"), minor("allocate")));
        assert!(f.enabled(major("md"), minor("release")));
        assert!(!f.enabled(major("pmc"), minor("attach")));
        f.set("process=* csw=*").unwrap();
        assert!(f.enabled(major("process"), minor("exit")));
        assert!(
            !f.enabled(major("pmc"), minor("allocate")),
            "a new value replaces the old one"
        );
        assert_eq!(f.set("bogus=*"), Err(EINVAL));
        assert_eq!(f.set("pmc=nosuch"), Err(EINVAL));
        assert_eq!(f.set("pmc"), Err(EINVAL));
        assert!(
            f.enabled(major("csw"), minor("swi")),
            "a rejected value changes nothing"
        );
        f.set("").unwrap();
        assert!(!f.enabled(major("csw"), minor("swi")));
    }

    #[test]
    fn long_lines_are_cut_not_overflowed() {
        let mut l = Line::new();
        for _ in 0..50 {
            let _ = l.write_str("é1234");
        }
        assert!(l.as_str().len() <= 160);
        assert!(l.as_str().starts_with("é1234"));
    }
}

//! The sysctl facts of sys/sysctl.h that the kernel crates and the
//! simulated machine share: the access flags (`CTLFLAG_*`) and the kinds
//! of oid the driver declares.

/// `CTLFLAG_RD`: reads allowed.
pub const CTLFLAG_RD: u32 = 0x8000_0000;
/// `CTLFLAG_WR`: writes allowed.
pub const CTLFLAG_WR: u32 = 0x4000_0000;
/// `CTLFLAG_RW`.
pub const CTLFLAG_RW: u32 = CTLFLAG_RD | CTLFLAG_WR;
/// `CTLFLAG_TUN`: the default is loaded from the kernel environment.
pub const CTLFLAG_TUN: u32 = 0x0008_0000;
/// `CTLFLAG_RDTUN`: read-only after boot (or load).
pub const CTLFLAG_RDTUN: u32 = CTLFLAG_RD | CTLFLAG_TUN;
/// `CTLFLAG_RWTUN`.
pub const CTLFLAG_RWTUN: u32 = CTLFLAG_RW | CTLFLAG_TUN;
/// `CTLFLAG_MPSAFE`.
pub const CTLFLAG_MPSAFE: u32 = 0x0004_0000;
/// `CTLFLAG_STATS`: statistics, which `SYSCTL_COUNTER_U64` sets.
pub const CTLFLAG_STATS: u32 = 0x0000_2000;
/// `CTLFLAG_NOFETCH`: the tunable is fetched by the code, not the kernel.
pub const CTLFLAG_NOFETCH: u32 = 0x0000_1000;

/// The type of an oid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SysctlType {
    /// `CTLTYPE_NODE` (`SYSCTL_NODE`): a node with children.
    Node,
    /// `CTLTYPE_INT` (`SYSCTL_INT`): a C `int`.
    Int,
    /// `CTLTYPE_U64` served by counter(9) (`SYSCTL_COUNTER_U64`): a write
    /// of any value zeroes it.
    Counter,
    /// `CTLTYPE_STRING`: `SYSCTL_STRING`, or `SYSCTL_PROC` with
    /// `CTLTYPE_STRING`.
    String,
}

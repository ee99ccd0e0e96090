//! The user/kernel ABI of hwpmc(4) and hwt(4), defined once.
//!
//! Every type here is laid out exactly as FreeBSD's C headers lay out the
//! type of the same name; `tools/abi-check` proves it by comparing sizes,
//! alignments, field offsets, constants and ioctl numbers with FreeBSD's
//! real headers compiled for amd64, arm64 and i386.
//!
//! | module        | FreeBSD header                                        |
//! |---------------|-------------------------------------------------------|
//! | [`pmc`]       | `sys/sys/pmc.h`                                       |
//! | [`pmc_events`]| `sys/dev/hwpmc/pmc_events.h`                          |
//! | [`pmc_mdep`]  | `machine/pmc_mdep.h` and the `dev/hwpmc` MD headers   |
//! | [`pmclog`]    | `sys/sys/pmclog.h`                                    |
//! | [`pmckern`]   | `sys/sys/pmckern.h` (the parts that are ABI)          |
//! | [`exterr`]    | `sys/sys/_uexterror.h`, `exterrvar.h`, `exterr_cat.h` |
//! | [`hwt`]       | `sys/sys/hwt.h`                                       |
//! | [`hwt_record`]| `sys/sys/hwt_record.h`                                |
//! | [`pt`]        | `sys/amd64/pt/pt.h` (Intel PT configuration)          |
//! | [`arm_spe`]   | `sys/arm64/spe/arm_spe.h` (ARM SPE configuration)     |
//! | [`coresight`] | `sys/arm64/coresight/etm4x.h` (ETMv4 configuration)   |
//!
//! Enumerations that cross the boundary are stored as plain integers in the
//! argument structs (a kernel must accept any value a user passes and reject
//! the bad ones), and have typed Rust enums with checked conversions.
#![no_std]

#[macro_use]
mod macros;

pub mod arm_spe;
pub mod coresight;
pub mod exterr;
pub mod hwt;
pub mod hwt_record;
pub mod ioccom;
pub mod plain;
pub mod pmc;
pub mod pmc_events;
pub mod pmc_mdep;
pub mod pmckern;
pub mod pmclog;
pub mod pt;
pub mod sysctl;

pub use plain::{AsBytes, Plain};

/// `PATH_MAX` of `sys/syslimits.h`; also `MAXPATHLEN`.
pub const PATH_MAX: usize = 1024;
/// `MAXCOMLEN` of `sys/param.h`: the longest command or thread name.
pub const MAXCOMLEN: usize = 19;

//! The workload programs: real programs written in C in `workloads/`,
//! compiled for FreeBSD on amd64 and arm64 by ksim's build script
//! (freestanding, with the crt, system call stubs and small library of
//! `workloads/`; with symbols, frame pointers and DWARF line information).
//!
//! To add one: write `workloads/<name>.c` with a `main` that uses only
//! what `ksim_workload.h` declares (add a system call there and in
//! `syscall_list.h`, serve it in [`crate::user_process`] and give it a
//! kernel function and cost there), then add the name to `PROGRAMS` in
//! `build.rs`, to [`NAMES`] and to `tools/sim-run`'s list of workloads.

use std::path::PathBuf;

use crate::cpu::Arch;

/// Every program.
pub const NAMES: &[&str] = &[
    "sort", "calls", "recurse", "syscalls", "faults", "threads", "mapobj", "rdpmc",
];

/// The shared object `mapobj` maps (built from `workloads/second.c`),
/// and where on the machine it expects it.
pub const SECOND_OBJECT: &str = "libsecond.so";
/// Where `mapobj` looks for [`SECOND_OBJECT`] by default.
pub const SECOND_OBJECT_PATH: &str = "/usr/lib/libsecond.so";

/// Where the build put program `name` for `arch`.
pub fn path(arch: Arch, name: &str) -> PathBuf {
    PathBuf::from(env!("KSIM_WORKLOADS_DIR"))
        .join(arch.name())
        .join(name)
}

/// The ELF file of program (or shared object) `name` for `arch`.
pub fn image(arch: Arch, name: &str) -> std::io::Result<Vec<u8>> {
    std::fs::read(path(arch, name))
}

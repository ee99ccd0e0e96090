//! Writes the workload programs of every architecture into the directory
//! named by the first argument: the seed corpus of the `elf_load` fuzz
//! target (tools/fuzz).

// Host code: the kernel allocation lints of sys/clippy.toml do not apply.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use ksim::cpu::Arch;
use ksim::programs;

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .ok_or_else(|| std::io::Error::other("usage: elf_seeds directory"))?;
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for name in programs::NAMES {
            let image = programs::image(arch, name)?;
            std::fs::write(dir.join(format!("{}-{name}", arch.name())), image)?;
        }
    }
    Ok(())
}

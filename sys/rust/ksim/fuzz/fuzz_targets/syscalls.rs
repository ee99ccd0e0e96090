//! The system calls ksim serves to programs, with arguments decoded from
//! arbitrary bytes (`ksim::user_process::replay_syscalls`): no call
//! panics, moves the caller's PC or fails with an errno it should not
//! return.
#![no_main]

use std::sync::OnceLock;

use ksim::cpu::Arch;
use ksim::programs;
use libfuzzer_sys::fuzz_target;

fn image(arch: Arch) -> &'static [u8] {
    static IMAGES: OnceLock<[Vec<u8>; 2]> = OnceLock::new();
    let images = IMAGES.get_or_init(|| {
        [Arch::X86_64, Arch::Aarch64].map(|a| programs::image(a, "calls").expect("built"))
    });
    &images[usize::from(arch == Arch::Aarch64)]
}

fuzz_target!(|bytes: &[u8]| {
    let Some((&first, rest)) = bytes.split_first() else {
        return;
    };
    let arch = if first & 1 == 0 {
        Arch::X86_64
    } else {
        Arch::Aarch64
    };
    ksim::user_process::replay_syscalls(image(arch), rest);
});

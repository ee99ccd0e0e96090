//! The ELF loader over arbitrary bytes: parsing never panics, and a file
//! it accepts loads (or fails with an error) without a panic, with each
//! segment's memory holding the file's bytes followed by zeros.
#![no_main]

use ksim::cpu::Cpu;
use ksim::imgact_elf::{self, ElfError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|image: &[u8]| {
    let Ok(exe) = imgact_elf::parse(image) else {
        return;
    };
    let mut cpu = Cpu::new(exe.arch, 0).expect("a CPU");
    match imgact_elf::load(&mut cpu, &exe, image, "/fuzz", &["fuzz"], &["A=b"]) {
        Ok(loaded) => {
            assert_eq!(cpu.pc(), exe.entry);
            assert_eq!(loaded.stack % 16, 0);
            for s in &exe.segments {
                let mut mem = vec![0u8; s.memsz as usize];
                cpu.read(s.vaddr, &mut mem)
                    .expect("a loaded segment is mapped");
                let file = &image[s.offset as usize..][..s.filesz as usize];
                assert_eq!(&mem[..file.len()], file);
                assert!(mem[file.len()..].iter().all(|&b| b == 0));
            }
        }
        Err(ElfError::Cpu(e)) => panic!("the loader let through what the CPU refused: {e}"),
        Err(_) => {}
    }
});

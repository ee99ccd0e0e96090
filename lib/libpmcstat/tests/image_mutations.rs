//! The image and symbol loaders over damaged ELF files: ksim's workload
//! programs (real FreeBSD executables with symbols and DWARF) truncated,
//! with bytes flipped and with fields overwritten, from a fixed seed.
//! Every file gives an image or a warning, never a panic; an accepted
//! image's symbol table is sorted and its search finds only symbols that
//! contain the address; line look-ups never panic. The same checks run
//! under libFuzzer in lib/libpmcstat/fuzz (tools/fuzz).

use libpmcstat::libpmcstat_image::{Image, ImageType, ImageWarnings};
use libpmcstat::libpmcstat_string::StringPool;

/// Checks one file's contents; returns whether it was accepted.
fn check(data: &[u8]) -> bool {
    let mut strings = StringPool::new();
    let mut image = Image::new(strings.intern("/usr/bin/x"), false);
    let mut warnings = ImageWarnings::default();
    image.read_bytes(&mut strings, "/root/usr/bin/x", data, 1, &mut warnings);
    if !matches!(image.kind, ImageType::Elf32 | ImageType::Elf64) {
        assert!(
            image.kind == ImageType::Indeterminable,
            "an unusable file is indeterminable"
        );
        return false;
    }
    let syms: Vec<_> = image.symbols.iter().copied().collect();
    assert!(
        syms.windows(2).all(|w| w[0].start < w[1].start),
        "sorted, distinct"
    );
    for s in &syms {
        for addr in [s.start, s.start.wrapping_add(1), s.end.wrapping_sub(1)] {
            if let Some(found) = image.symbols.search(addr) {
                assert!(found.start <= addr && addr < found.end);
            }
        }
    }
    image.set_lines_from(data);
    for s in syms.iter().take(64) {
        let _ = image.source_line(&strings, s.start);
    }
    true
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn damaged_programs_give_images_or_warnings() {
    let mut programs = Vec::new();
    for arch in [ksim::cpu::Arch::X86_64, ksim::cpu::Arch::Aarch64] {
        for name in ["sort", "calls", "threads"] {
            programs.push(ksim::programs::image(arch, name).expect("a workload program"));
        }
    }
    // The programs themselves are accepted, with their functions.
    for p in &programs {
        assert!(check(p));
    }
    let mut rng = Rng(0x5eed_1e1f);
    let mut accepted = 0;
    for round in 0..3000 {
        let mut data = programs[round % programs.len()].clone();
        match rng.below(4) {
            0 => data.truncate(rng.below(data.len())),
            1 => {
                for _ in 0..1 + rng.below(16) {
                    let i = rng.below(data.len());
                    data[i] ^= 1 << rng.below(8);
                }
            }
            2 => {
                // A header field (ELF header, program or section headers)
                // set to an extreme value.
                let i = rng.below(data.len().min(4096)) & !7;
                let v = [0u64, u64::MAX, 1 << 63, 0xffff_ffff][rng.below(4)];
                if i + 8 <= data.len() {
                    data[i..i + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            _ => {
                let i = rng.below(data.len());
                let j = rng.below(data.len());
                data.swap(i, j);
            }
        }
        if check(&data) {
            accepted += 1;
        }
    }
    assert!(accepted > 100, "most damage leaves an ELF file: {accepted}");
}

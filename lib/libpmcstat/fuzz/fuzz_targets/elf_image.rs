//! The image loader over arbitrary bytes: a file gives an image or a
//! warning, never a panic; an accepted image's symbols are sorted and
//! distinct, a search finds only a symbol that contains the address,
//! and DWARF line look-ups never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use libpmcstat::libpmcstat_image::{Image, ImageType, ImageWarnings};
use libpmcstat::libpmcstat_string::StringPool;

fuzz_target!(|data: &[u8]| {
    let mut strings = StringPool::new();
    let mut image = Image::new(strings.intern("/fuzz"), data.first() == Some(&0));
    let mut warnings = ImageWarnings::default();
    image.read_bytes(&mut strings, "/fuzz", data, 2, &mut warnings);
    if !matches!(image.kind, ImageType::Elf32 | ImageType::Elf64) {
        return;
    }
    let syms: Vec<_> = image.symbols.iter().copied().collect();
    assert!(syms.windows(2).all(|w| w[0].start < w[1].start));
    for s in &syms {
        if let Some(found) = image.symbols.search(s.start) {
            assert!(found.start <= s.start && s.start < found.end);
        }
    }
    image.set_lines_from(data);
    for s in syms.iter().take(16) {
        let _ = image.source_line(&strings, s.start);
    }
});

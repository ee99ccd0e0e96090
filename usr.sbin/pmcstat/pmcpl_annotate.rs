//! The annotate plugin (pmcpl_annotate.c): `-m file` prints a line per
//! sample for pmcannotate(8): the sampled PC, its function, and the
//! function's first and one-past-last addresses,
//! `0x... name 0x... 0x...`. No header, callers ignored. A PC in no
//! mapped image counts as unclaimed and prints nothing; one in no known
//! function prints nothing.
//!
//! Mended on purpose: the sampled PC is given as a link-time address,
//! like the function's bounds (FreeBSD's prints the run-time PC beside
//! link-time bounds, which differ for PIE programs and shared objects).

use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, Plugin, Sample};

/// The `-m` output.
pub struct AnnotatePlugin {
    out: Box<dyn Write>,
}

impl AnnotatePlugin {
    /// A plugin writing into `out`.
    pub fn new(out: Box<dyn Write>) -> AnnotatePlugin {
        AnnotatePlugin { out }
    }
}

impl Plugin for AnnotatePlugin {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        let Some((pc, map)) = a.claim_sampled_pc(s) else {
            return;
        };
        let off = a.image_offset(&map, pc);
        let image = &a.images[map.image as usize];
        let Some(sym) = image.symbols.search(off) else {
            return;
        };
        let v = image.vaddr;
        // A failed write shows at the flush, at the end.
        let _ = writeln!(
            self.out,
            "{:#x} {} {:#x} {:#x}",
            v.wrapping_add(off),
            a.strings.get(sym.name),
            v.wrapping_add(sym.start),
            v.wrapping_add(sym.end)
        );
    }

    fn shutdown(&mut self, _a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        self.out.flush()
    }
}

//! The annotated call graph plugin (pmcpl_annotate_cg.c): `-a file`
//! prints each sample's chain, the sampled PC first, a line per frame
//! (`0x... function file:line`, the file and line from the image's
//! DWARF line table, `??:0` without one; `0x... <unknown> ??:0` for a PC
//! in no mapped function), and `--` after each sample.
//!
//! Mended on purpose: the source line is looked up at the frame's
//! link-time address (FreeBSD's asks addr2line for the run-time one,
//! wrong for PIE programs and shared objects).

use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, KERNEL_PID, Plugin, Sample};

/// The `-a` output.
pub struct AnnotateCgPlugin {
    out: Box<dyn Write>,
    text: String,
}

impl AnnotateCgPlugin {
    /// A plugin writing into `out`.
    pub fn new(out: Box<dyn Write>) -> AnnotateCgPlugin {
        AnnotateCgPlugin {
            out,
            text: String::new(),
        }
    }
}

impl Plugin for AnnotateCgPlugin {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        let space = if s.usermode { s.pid } else { KERNEL_PID };
        self.text.clear();
        for &pc in s.pcs {
            let map = a.procs.get(&space).and_then(|p| p.find_map(pc)).copied();
            let found = map.and_then(|m| {
                let off = a.image_offset(&m, pc);
                let sym = a.images[m.image as usize].symbols.search(off)?;
                Some((m.image, off, sym.name))
            });
            match found {
                Some((image, off, name)) => {
                    let line = a.images[image as usize].source_line(&a.strings, off);
                    let (file, line) = line.map_or(("??".to_owned(), 0), |l| (l.file, l.line));
                    self.text
                        .push_str(&format!("{pc:#x} {} {file}:{line}\n", a.strings.get(name)));
                }
                None => self.text.push_str(&format!("{pc:#x} <unknown> ??:0\n")),
            }
        }
        self.text.push_str("--\n");
        // A failed write shows at the flush, at the end.
        let _ = self.out.write_all(self.text.as_bytes());
    }

    fn shutdown(&mut self, _a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        self.out.flush()
    }
}

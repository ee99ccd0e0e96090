//! Folded stacks (`-x file`, an extension): one line per distinct call
//! chain, its frames from the outermost caller to the sampled function
//! separated by `;`, then a space and the number of samples, sorted by
//! the text of the stack, the format FlameGraph's `stackcollapse` tools
//! write and `flamegraph.pl`, inferno and speedscope read.
//!
//! A frame is its function's name, or `0x...` (its address) in an image
//! without a symbol for it, or `[unknown]` for a PC in no mapped image.
//! The whole chain is kept (no `-z` limit). When the log has PMCs of
//! more than one event, each stack starts with the event's name.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, ImageId, Plugin, Sample};
use libpmcstat::libpmcstat_string::IStr;

/// A resolved frame: an (image, function offset) pair, or a PC no map
/// holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frame {
    /// A function (or, without a symbol, an address) of an image.
    Function(ImageId, u64),
    /// A PC outside every mapped image.
    Unknown,
}

/// Resolves a sample's chain to frames, the sampled PC first, as the
/// call graph does (a kernel chain that continues into user frames is
/// resolved against the process from there on).
pub fn resolve(a: &Analysis, s: &Sample<'_>, out: &mut Vec<Frame>) {
    out.clear();
    for (pc, map) in a.chain_maps(s) {
        out.push(match map {
            Some(m) => {
                let off = a.image_offset(&m, pc);
                let func = a.images[m.image as usize]
                    .symbols
                    .search(off)
                    .map_or(off, |sym| sym.start);
                Frame::Function(m.image, func)
            }
            None => Frame::Unknown,
        });
    }
}

/// The text of a frame.
pub fn frame_name(a: &Analysis, f: Frame) -> String {
    match f {
        Frame::Function(image, func) => a.function_name(image, func),
        Frame::Unknown => "[unknown]".to_owned(),
    }
}

/// Stacks counted by (PMC name, frames from the root).
#[derive(Debug, Default)]
pub struct StackCounts {
    frames: HashMap<Frame, u32>,
    frame_list: Vec<Frame>,
    /// Sample count of each (PMC record's name, stack of frame ids).
    pub stacks: HashMap<(IStr, Vec<u32>), u64>,
    scratch: Vec<Frame>,
}

impl StackCounts {
    /// Adds a sample.
    pub fn add(&mut self, a: &Analysis, s: &Sample<'_>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        resolve(a, s, &mut scratch);
        let mut ids = Vec::with_capacity(scratch.len());
        for f in scratch.iter().rev() {
            let next = u32::try_from(self.frame_list.len()).expect("fewer than 2^32 frames");
            let id = *self.frames.entry(*f).or_insert_with(|| {
                self.frame_list.push(*f);
                next
            });
            ids.push(id);
        }
        self.scratch = scratch;
        let name = a.pmcs[s.pmc].name;
        *self.stacks.entry((name, ids)).or_insert(0) += 1;
    }

    /// The folded lines, sorted.
    pub fn lines(&self, a: &Analysis) -> Vec<(String, u64)> {
        let names: Vec<String> = self.frame_list.iter().map(|&f| frame_name(a, f)).collect();
        let mut events: Vec<IStr> = self.stacks.keys().map(|(e, _)| *e).collect();
        events.sort_unstable();
        events.dedup();
        let several = events.len() > 1;
        let mut lines: Vec<(String, u64)> = self
            .stacks
            .iter()
            .map(|((event, ids), &n)| {
                let mut line = String::new();
                if several {
                    line.push_str(a.string(*event));
                    line.push(';');
                }
                for (i, id) in ids.iter().enumerate() {
                    if i > 0 {
                        line.push(';');
                    }
                    line.push_str(&names[*id as usize]);
                }
                (line, n)
            })
            .collect();
        lines.sort();
        lines
    }
}

/// The `-x` output.
pub struct FoldedPlugin {
    counts: StackCounts,
    out: Box<dyn Write>,
}

impl FoldedPlugin {
    /// A plugin writing into `out`.
    pub fn new(out: Box<dyn Write>) -> FoldedPlugin {
        FoldedPlugin {
            counts: StackCounts::default(),
            out,
        }
    }
}

impl Plugin for FoldedPlugin {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        self.counts.add(a, s);
    }

    fn shutdown(&mut self, a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        for (line, n) in self.counts.lines(a) {
            writeln!(self.out, "{line} {n}")?;
        }
        self.out.flush()
    }
}

//! The source summary (`-y file`, an extension): per PMC event, the
//! functions the samples fell in, the most sampled first, each with its
//! share and count, and under it the source lines of its samples (from
//! the image's DWARF line table), the most sampled first, with the
//! line's text, after a tab, when the source file can be read:
//!
//! ```text
//! @ EVENT [N samples]
//!
//!  67.50%     675  quick_sort @ /usr/bin/sort
//!          41.63%     281  sort.c:36<TAB>if (a[j] < pivot) {
//! ```
//!
//! A line's share is of its function's samples. A function of an image
//! without line information has no lines under it; a PC in no known
//! function is shown as its address.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, ImageId, Plugin, Sample};
use libpmcstat::libpmcstat_string::IStr;

/// Samples of one function.
#[derive(Debug, Default)]
struct Func {
    samples: u64,
    /// By sampled offset in the image.
    pcs: HashMap<u64, u64>,
}

/// The `-y` output.
pub struct SummaryPlugin {
    /// By (event, image, function start).
    funcs: HashMap<(IStr, ImageId, u64), Func>,
    out: Box<dyn Write>,
}

impl SummaryPlugin {
    /// A plugin writing into `out`.
    pub fn new(out: Box<dyn Write>) -> SummaryPlugin {
        SummaryPlugin {
            funcs: HashMap::default(),
            out,
        }
    }
}

impl Plugin for SummaryPlugin {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        let Some((pc, map)) = a.claim_sampled_pc(s) else {
            return;
        };
        let off = a.image_offset(&map, pc);
        let func = a.images[map.image as usize]
            .symbols
            .search(off)
            .map_or(off, |sym| sym.start);
        let f = self
            .funcs
            .entry((a.pmcs[s.pmc].name, map.image, func))
            .or_default();
        f.samples += 1;
        *f.pcs.entry(off).or_insert(0) += 1;
    }

    fn shutdown(&mut self, a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        let mut sources: HashMap<String, Option<Vec<String>>> = HashMap::default();
        let events = a.event_names();
        let mut text = String::new();
        for event in events {
            let mut funcs: Vec<(&(IStr, ImageId, u64), &Func)> =
                self.funcs.iter().filter(|(k, _)| k.0 == event).collect();
            if funcs.is_empty() {
                continue;
            }
            funcs.sort_by(|x, y| y.1.samples.cmp(&x.1.samples).then(x.0.cmp(y.0)));
            let total: u64 = funcs.iter().map(|(_, f)| f.samples).sum();
            text.push_str(&format!("@ {} [{total} samples]\n\n", a.string(event)));
            for (&(_, image, start), f) in funcs {
                let img = &a.images[image as usize];
                let name = a.function_name(image, start);
                let path = img.fullpath.map_or("", |p| a.strings.get(p)).to_owned();
                text.push_str(&format!(
                    "{:6.2}% {:>7}  {name} @ {path}\n",
                    100.0 * f.samples as f64 / total as f64,
                    f.samples
                ));
                // The function's samples by source line.
                let mut lines: HashMap<(String, u32), u64> = HashMap::default();
                for (&off, &n) in &f.pcs {
                    if let Some(l) = a.images[image as usize].source_line(&a.strings, off) {
                        *lines.entry((l.file, l.line)).or_insert(0) += n;
                    }
                }
                let mut lines: Vec<((String, u32), u64)> = lines.into_iter().collect();
                lines.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
                for ((file, line), n) in lines {
                    let short = file.rsplit('/').next().unwrap_or(&file);
                    let source = sources
                        .entry(file.clone())
                        .or_insert_with(|| {
                            std::fs::read_to_string(&file)
                                .ok()
                                .map(|t| t.lines().map(str::to_owned).collect())
                        })
                        .as_ref()
                        .and_then(|l| l.get((line as usize).checked_sub(1)?))
                        .map_or("", |s| s.trim());
                    text.push_str(&format!(
                        "        {:6.2}% {:>7}  {short}:{line}\t{source}\n",
                        100.0 * n as f64 / f.samples as f64,
                        n
                    ));
                }
            }
            text.push('\n');
        }
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }
}

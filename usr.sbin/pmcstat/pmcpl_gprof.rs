//! The gprof plugin (pmcpl_gprof.c): `-g` writes, for each PMC's event
//! and each executable image it sampled, a BSD `gmon.out` file that
//! gprof(1) reads: `<samplesdir>/<event>/<image>.gmon`, a histogram of
//! the sampled PCs over the image's text (a 16-bit counter per 4 bytes,
//! 32 on arm64; 64-bit counters with `-e`), followed by the call arcs
//! the call graph of the same samples gives (caller to callee, in the
//! same image).
//!
//! The file layout (host byte order): `lpc` and `hpc` (the text's
//! link-time range, `u_long`; `hpc` rounded up to the end of the last
//! bucket, where FreeBSD's leaves the text's end, which makes gprof's
//! buckets straddle functions), `ncnt` (the header's 40 bytes plus the
//! histogram's), the version 0x00051879, profrate 0, the counter type (0,
//! or 64 with `-e`), two spare words, the histogram, then the arcs as
//! `u_long frompc, u_long selfpc, long count`.
//!
//! Where FreeBSD's is mended on purpose: the per-CPU PMCs of one
//! system-wide event share their file and add up in it (FreeBSD's
//! second PMC zeroes the first one's counts); a file is truncated when
//! made (FreeBSD's keeps an older, longer file's tail); the arcs of a
//! function sampled from a single caller are written too (FreeBSD skips
//! them); images are listed in the map file in the order the log named
//! them.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, ImageId, Plugin, Sample};
use libpmcstat::libpmcstat_string::IStr;
use pmctool::sysexits::EX_OSERR;

use crate::PROGRAM;
use std::cell::RefCell;
use std::rc::Rc;

use crate::pmcpl_callgraph::CallGraph;

/// `GMONVERSION`.
const GMON_VERSION: u32 = 0x0005_1879;
/// The header's size with 64-bit `u_long`.
const GMON_HEADER: usize = 40;
/// The counter type that marks 64-bit counters (`-e`).
const HISTCOUNTER_WIDE: u32 = 64;

/// Bytes of text per histogram bucket (FreeBSD's `FUNCTION_ALIGNMENT`
/// of the image's architecture).
fn function_alignment(machine: u16) -> u64 {
    /// `EM_AARCH64`.
    const EM_AARCH64: u16 = 183;
    if machine == EM_AARCH64 { 32 } else { 4 }
}

/// Call arcs (caller's address, callee's address, count) of each
/// (image, event) profile.
type Arcs = HashMap<(ImageId, IStr), Vec<(u64, u64, i64)>>;

/// The profile of one image under one event.
#[derive(Debug)]
struct Gmon {
    hist: Vec<u64>,
    samples: u64,
    overflowed: bool,
}

/// The `-g` output.
pub struct GprofPlugin {
    samplesdir: String,
    wide: bool,
    /// The call graph of the same samples, for the arcs: the one `-g`
    /// makes first of all plugins (FreeBSD's `pa_pplugin`), which adds
    /// each sample to it before this plugin sees the sample.
    graph: Rc<RefCell<CallGraph>>,
    depth: usize,
    /// Profiles by (image, event name), in the order made.
    records: HashMap<(ImageId, IStr), usize>,
    gmons: Vec<((ImageId, IStr), Gmon)>,
}

impl GprofPlugin {
    /// A plugin writing under `samplesdir` (`-D`, "." by default); `wide`
    /// is `-e`; `graph` is the call graph of the samples, of `depth`
    /// frames (`-z`).
    pub fn new(
        samplesdir: &str,
        wide: bool,
        graph: Rc<RefCell<CallGraph>>,
        depth: usize,
    ) -> GprofPlugin {
        GprofPlugin {
            samplesdir: samplesdir.to_owned(),
            wide,
            graph,
            depth,
            records: HashMap::default(),
            gmons: Vec::new(),
        }
    }

    fn max(&self) -> u64 {
        if self.wide {
            u64::MAX
        } else {
            u64::from(u16::MAX)
        }
    }
}

/// `pi_samplename` of every image: its file name with `.gmon`, made
/// unique with `~NNN` in the order the images were named.
fn sample_names(a: &Analysis) -> Vec<String> {
    let mut used = std::collections::HashSet::new();
    let mut names = Vec::with_capacity(a.images.len());
    for image in &a.images {
        let path = a.string(image.execpath);
        let base = path.rsplit('/').next().unwrap_or(path);
        let mut candidate = format!("{}.gmon", truncate(base, 249));
        let mut n = 0;
        while used.contains(&candidate) && n < 999 {
            n += 1;
            candidate = format!("{}~{n:03}.gmon", truncate(base, 245));
        }
        used.insert(candidate.clone());
        names.push(candidate);
    }
    names
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Plugin for GprofPlugin {
    fn new_pmc(&mut self, a: &Analysis, pmc: usize) {
        let dir = format!("{}/{}", self.samplesdir, a.string(a.pmcs[pmc].name));
        if std::path::Path::new(&dir).is_dir() {
            return;
        }
        use std::os::unix::fs::DirBuilderExt;
        if let Err(e) = std::fs::DirBuilder::new().mode(0o755).create(&dir) {
            // err(3), as FreeBSD's: the analysis cannot go on.
            let exit = PROGRAM.err(
                EX_OSERR,
                format!("ERROR: Cannot create directory \"{dir}\""),
                e.raw_os_error().unwrap_or(libc::EIO),
            );
            eprintln!("{}", exit.message);
            std::process::exit(i32::from(exit.code));
        }
    }

    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        let Some((pc, map)) = a.claim_sampled_pc(s) else {
            return;
        };
        let image = &a.images[map.image as usize];
        let align = function_alignment(image.machine);
        let key = (map.image, a.pmcs[s.pmc].name);
        let index = match self.records.get(&key) {
            Some(&i) => i,
            None => {
                let buckets = (image.end - image.start).div_ceil(align) as usize;
                self.gmons.push((
                    key,
                    Gmon {
                        hist: vec![0; buckets],
                        samples: 0,
                        overflowed: false,
                    },
                ));
                self.records.insert(key, self.gmons.len() - 1);
                self.gmons.len() - 1
            }
        };
        let max = self.max();
        let g = &mut self.gmons[index].1;
        let bucket = ((pc - map.low) / align) as usize;
        if let Some(c) = g.hist.get_mut(bucket) {
            if *c >= max {
                g.overflowed = true;
            } else {
                *c += 1;
            }
        }
        g.samples += 1;
    }

    fn shutdown(&mut self, a: &mut Analysis, mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        let names = sample_names(a);
        let arcs = self.arcs(a);
        let mut files: Vec<(String, usize)> = Vec::with_capacity(self.gmons.len());
        for (i, ((image, event), g)) in self.gmons.iter().enumerate() {
            let path = format!(
                "{}/{}/{}",
                self.samplesdir,
                a.string(*event),
                names[*image as usize]
            );
            let img = &a.images[*image as usize];
            let mut bytes = Vec::with_capacity(GMON_HEADER + g.hist.len() * 2);
            // hpc is the end of the last bucket, so that each bucket
            // covers exactly its bytes of text in gprof's arithmetic.
            let align = function_alignment(img.machine);
            let hpc = img.start + g.hist.len() as u64 * align;
            bytes.extend_from_slice(&img.start.to_ne_bytes());
            bytes.extend_from_slice(&hpc.to_ne_bytes());
            let width = if self.wide { 8 } else { 2 };
            let ncnt = (g.hist.len() * width + GMON_HEADER) as u32;
            bytes.extend_from_slice(&ncnt.to_ne_bytes());
            bytes.extend_from_slice(&GMON_VERSION.to_ne_bytes());
            bytes.extend_from_slice(&0u32.to_ne_bytes());
            let kind = if self.wide { HISTCOUNTER_WIDE } else { 0 };
            bytes.extend_from_slice(&kind.to_ne_bytes());
            bytes.extend_from_slice(&[0; 8]);
            for &c in &g.hist {
                if self.wide {
                    bytes.extend_from_slice(&c.to_ne_bytes());
                } else {
                    bytes.extend_from_slice(&(c as u16).to_ne_bytes());
                }
            }
            for &(from, to, count) in arcs.get(&(*image, *event)).into_iter().flatten() {
                bytes.extend_from_slice(&from.to_ne_bytes());
                bytes.extend_from_slice(&to.to_ne_bytes());
                bytes.extend_from_slice(&count.to_ne_bytes());
            }
            if let Err(e) = std::fs::write(&path, &bytes) {
                PROGRAM.warnx(format!("ERROR: Cannot write \"{path}\": {e}"));
                continue;
            }
            if g.overflowed && a.opts.verbosity >= 1 {
                PROGRAM.warnx(format!("WARNING: profile \"{path}\" overflowed."));
            }
            files.push((path, i));
        }
        if let Some(m) = mapfile {
            for (id, image) in a.images.iter().enumerate() {
                write!(m, " \"{}\" => \"{}\"", a.string(image.execpath), names[id])?;
                for ((img, event), g) in &self.gmons {
                    if *img as usize == id {
                        write!(m, " {}/{}", a.string(*event), g.samples)?;
                    }
                }
                writeln!(m)?;
            }
        }
        Ok(())
    }
}

impl GprofPlugin {
    /// The call arcs of each profile: (caller's function, callee's
    /// function, samples through the pair) for callers in the same image
    /// as their callee, from the call graph of every PMC of the event.
    fn arcs(&self, a: &Analysis) -> Arcs {
        let mut out: HashMap<(ImageId, IStr), HashMap<(u64, u64), i64>> = HashMap::default();
        if self.depth <= 1 {
            return HashMap::default();
        }
        let graph = self.graph.borrow();
        for pmc in a.pmcs_listed() {
            let pr = &a.pmcs[pmc];
            let (tops, _) = graph.top_nodes(pr.pmcid);
            let mut stack: Vec<u32> = tops;
            while let Some(n) = stack.pop() {
                let node = &graph.nodes[n as usize];
                for &c in &node.children {
                    let child = &graph.nodes[c as usize];
                    if child.image == node.image {
                        let vaddr = a.images[node.image as usize].vaddr;
                        *out.entry((node.image, pr.name))
                            .or_default()
                            .entry((
                                vaddr.wrapping_add(child.func),
                                vaddr.wrapping_add(node.func),
                            ))
                            .or_insert(0) += i64::from(child.count);
                    }
                    stack.push(c);
                }
            }
        }
        out.into_iter()
            .map(|(k, arcs)| {
                let mut v: Vec<(u64, u64, i64)> =
                    arcs.into_iter().map(|((f, t), c)| (f, t, c)).collect();
                v.sort_unstable();
                (k, v)
            })
            .collect()
    }
}

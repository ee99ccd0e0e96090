//! The calltree plugin (pmcpl_calltree.c): `-F file` writes the samples
//! as a KCachegrind (callgrind format) profile, which kcachegrind(1) and
//! callgrind_annotate(1) read.
//!
//! One event per PMC (`NAME_INDEX`, non-alphanumerics as `_`); a node per
//! (image, function) shared by every call context; a sample's chain
//! from its outermost valid frame down to the sampled function adds one
//! to each caller-to-callee arc (inclusive cost) and one to the sampled
//! function's own cost at the sampled instruction; `calls=` is estimated
//! as FreeBSD does (one more each time an arc is used again after a
//! sample of the same PMC that did not use it). Records are written
//! breadth first from a `root` node, each with `ob=`, `fl=`, `fn=`, its
//! own cost lines (`address line cost...`) and its calls (`cob=`, `cfi=`,
//! `cfn=`, `calls=`, then the caller's position and the inclusive cost).
//! Source files and lines come from the images' DWARF line tables (`???`
//! and 0 without); function names from their symbols. FreeBSD's
//! expansion of inlined functions into `inner@outer` nodes is not done.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, ImageId, Plugin, Sample};

/// A node: the root, or a function of an image.
#[derive(Debug, Default)]
struct Node {
    func: Option<(ImageId, u64)>,
    self_cost: Vec<u64>,
    arcs: Vec<Arc>,
    arc_index: HashMap<u32, usize>,
    instrs: Vec<(u64, Vec<u64>)>,
    instr_index: HashMap<u64, usize>,
}

#[derive(Debug)]
struct Arc {
    child: u32,
    samples: Vec<u64>,
    calls: u64,
    last_call: Vec<u64>,
}

fn bump(v: &mut Vec<u64>, i: usize, by: u64) {
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] += by;
}

fn at(v: &[u64], i: usize) -> u64 {
    v.get(i).copied().unwrap_or(0)
}

/// The `-F` output.
pub struct CalltreePlugin {
    nodes: Vec<Node>,
    index: HashMap<(ImageId, u64), u32>,
    call_id: Vec<u64>,
    out: Box<dyn Write>,
    path: Vec<u32>,
}

impl CalltreePlugin {
    /// A plugin writing into `out`.
    pub fn new(out: Box<dyn Write>) -> CalltreePlugin {
        CalltreePlugin {
            nodes: vec![Node::default()],
            index: HashMap::default(),
            call_id: Vec::new(),
            out,
            path: Vec::new(),
        }
    }

    fn node(&mut self, image: ImageId, func: u64) -> u32 {
        if let Some(&n) = self.index.get(&(image, func)) {
            return n;
        }
        let n = u32::try_from(self.nodes.len()).expect("fewer than 2^32 nodes");
        self.nodes.push(Node {
            func: Some((image, func)),
            ..Node::default()
        });
        self.index.insert((image, func), n);
        n
    }

    fn arc(&mut self, parent: u32, child: u32, pmc: usize) {
        let call = at(&self.call_id, pmc);
        let p = &mut self.nodes[parent as usize];
        match p.arc_index.get(&child) {
            Some(&i) => {
                let a = &mut p.arcs[i];
                bump(&mut a.samples, pmc, 1);
                if call.saturating_sub(at(&a.last_call, pmc)) > 1 {
                    a.calls += 1;
                }
                if a.last_call.len() <= pmc {
                    a.last_call.resize(pmc + 1, 0);
                }
                a.last_call[pmc] = call;
            }
            None => {
                let mut samples = Vec::new();
                bump(&mut samples, pmc, 1);
                let mut last_call = vec![0; pmc + 1];
                last_call[pmc] = call;
                p.arc_index.insert(child, p.arcs.len());
                p.arcs.push(Arc {
                    child,
                    samples,
                    calls: 1,
                    last_call,
                });
            }
        }
    }
}

impl Plugin for CalltreePlugin {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        let pmc = a.pmcs[s.pmc].index as usize;
        // The frames that lie in a mapped image, up to the first that
        // does not.
        let mut frames: Vec<(ImageId, u64, u64)> = Vec::with_capacity(s.pcs.len());
        let mut unknown = 0;
        for (pc, map) in a.chain_maps(s) {
            let Some(map) = map else { break };
            let off = a.image_offset(&map, pc);
            let func = match a.images[map.image as usize].symbols.search(off) {
                Some(sym) => sym.start,
                None => {
                    unknown += 1;
                    off
                }
            };
            frames.push((map.image, func, off));
        }
        a.stats.samples_unknown_function += unknown;
        if frames.is_empty() {
            a.stats.callchain_dubious_frames += 1;
            a.pmcs[s.pmc].dubious_frames += 1;
            return;
        }
        bump(&mut self.call_id, pmc, 1);
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        for &(image, func, _) in frames.iter().rev() {
            path.push(self.node(image, func));
        }
        let mut parent = 0;
        for &n in &path {
            self.arc(parent, n, pmc);
            parent = n;
        }
        let leaf = &mut self.nodes[parent as usize];
        bump(&mut leaf.self_cost, pmc, 1);
        let raw = frames[0].2;
        let i = match leaf.instr_index.get(&raw) {
            Some(&i) => i,
            None => {
                leaf.instrs.push((raw, Vec::new()));
                leaf.instr_index.insert(raw, leaf.instrs.len() - 1);
                leaf.instrs.len() - 1
            }
        };
        bump(&mut leaf.instrs[i].1, pmc, 1);
        self.path = path;
    }

    fn shutdown(&mut self, a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        let npmc = a.pmcs.len();
        let mut text = String::new();
        text.push_str("version: 1\ncreator: pmcstat\npositions: instr line\nevents:");
        for i in 0..npmc {
            let pr = a
                .pmcs
                .iter()
                .find(|p| p.index as usize == i)
                .expect("index");
            text.push(' ');
            text.push_str(&event_name(a.string(pr.name), i));
        }
        text.push_str("\nsummary:");
        for i in 0..npmc {
            let sum: u64 = self.nodes[0].arcs.iter().map(|r| at(&r.samples, i)).sum();
            text.push_str(&format!(" {sum}"));
        }
        text.push('\n');
        let costs = |v: &[u64]| -> String { (0..npmc).map(|i| format!(" {}", at(v, i))).collect() };
        // Breadth first from the root, each node once.
        let mut queued = vec![false; self.nodes.len()];
        let mut queue = VecDeque::from([0u32]);
        queued[0] = true;
        while let Some(n) = queue.pop_front() {
            let node = &self.nodes[n as usize];
            let (faddr, fline) = match node.func {
                None => {
                    text.push_str("fn=root\n");
                    text.push_str(&format!("0x0 1{}\n", costs(&[])));
                    (0, 0)
                }
                Some((image, func)) => {
                    let (file, line, name) = describe(a, image, func);
                    let img = &a.images[image as usize];
                    let path = img.fullpath.map_or("", |p| a.string(p)).to_owned();
                    let vaddr = img.vaddr;
                    let faddr = vaddr.wrapping_add(func);
                    text.push_str(&format!("ob={path}\nfl={file}\nfn={name}\n"));
                    if node.instrs.is_empty() {
                        text.push_str(&format!(
                            "{} {line}{}\n",
                            pointer(faddr),
                            costs(&node.self_cost)
                        ));
                    } else {
                        for (off, samples) in &node.instrs {
                            let iline = a.images[image as usize]
                                .source_line(&a.strings, *off)
                                .map_or(0, |l| l.line);
                            text.push_str(&format!(
                                "{} {iline}{}\n",
                                pointer(vaddr.wrapping_add(*off)),
                                costs(samples)
                            ));
                        }
                    }
                    (faddr, line)
                }
            };
            for arc in &self.nodes[n as usize].arcs {
                let (cimage, cfunc) = self.nodes[arc.child as usize]
                    .func
                    .expect("only the root has no function");
                let (cfile, cline, cname) = describe(a, cimage, cfunc);
                let cimg = &a.images[cimage as usize];
                let cpath = cimg.fullpath.map_or("", |p| a.string(p));
                let caddr = cimg.vaddr.wrapping_add(cfunc);
                text.push_str(&format!(
                    "cob={cpath}\ncfi={cfile}\ncfn={cname}\ncalls={} {} {cline}\n{} {fline}{}\n",
                    arc.calls,
                    pointer(caddr),
                    pointer(faddr),
                    costs(&arc.samples)
                ));
                if !queued[arc.child as usize] {
                    queued[arc.child as usize] = true;
                    queue.push_back(arc.child);
                }
            }
            if text.len() > 1 << 16 {
                self.out.write_all(text.as_bytes())?;
                text.clear();
            }
        }
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }
}

/// `%p`: 0x and lowercase hex, 0x0 for zero.
fn pointer(v: u64) -> String {
    format!("{v:#x}")
}

/// A function's source file, line and name: from the DWARF line table
/// and the symbol; `???`, 0 and the address without.
fn describe(a: &mut Analysis, image: ImageId, func: u64) -> (String, u32, String) {
    let name = a.function_name(image, func);
    match a.images[image as usize].source_line(&a.strings, func) {
        Some(l) => (l.file, l.line, name),
        None => ("???".to_owned(), 0, name),
    }
}

/// An event's name in the file: `NAME_INDEX` in at most 39 characters,
/// every byte that is not an ASCII letter or digit made `_`.
pub fn event_name(name: &str, index: usize) -> String {
    let full = format!("{name}_{index}");
    full.bytes()
        .take(39)
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                b as char
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_as_freebsd_writes_them() {
        assert_eq!(event_name("INST_RETIRED.ANY", 0), "INST_RETIRED_ANY_0");
        assert_eq!(event_name("SOFT-CLOCK.HARD", 12), "SOFT_CLOCK_HARD_12");
        assert_eq!(event_name(&"x".repeat(50), 3).len(), 39);
    }
}

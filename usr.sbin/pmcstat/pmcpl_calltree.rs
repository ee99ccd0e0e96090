//! The calltree plugin (pmcpl_calltree.c): `-F file` writes the samples
//! as a KCachegrind (callgrind format) profile, which kcachegrind(1) and
//! callgrind_annotate(1) read, and the calltree view of `-T`.
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
//! and 0 without); function names from their symbols.
//!
//! Before the file is written, inlined code is split out as FreeBSD's
//! `_pmcpl_ct_expand_inline` does: for each function, the name the DWARF
//! information gives its first address is compared with the name it
//! gives each sampled instruction (the innermost inlined function, as
//! `addr2line -f` without `-i` names it); an instruction whose name
//! differs moves, with its samples, to a child node `inner@outer` (one
//! per function, source file and name) that the function calls once,
//! and its line stays in the function with no cost. At verbosity 2 and
//! up (`-v`), each such instruction is reported as `WARNING: inlined
//! function at ADDR INNER in OUTER` on the print file.
//!
//! The top view (`pmcpl_ct_topdisplay`) draws each path of the tree from
//! the root, following the arcs whose share of the PMC's samples is over
//! the threshold, as a row: the summed own share of the row's functions,
//! then each function as `name@image(share%)`, the image only where it
//! changes, the share only over the threshold, rows sorted by their sums
//! and wrapped at the display's width.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, ImageId, Plugin, Sample};

/// A node: the root, a function of an image, or code inlined into one.
#[derive(Debug, Default)]
struct Node {
    func: Option<(ImageId, u64)>,
    /// For a node of inlined code: its source file and `inner@outer`
    /// (FreeBSD's `PMCPL_PCT_NAME` nodes).
    inline: Option<(String, String)>,
    self_cost: Vec<u64>,
    arcs: Vec<Arc>,
    arc_index: HashMap<u32, usize>,
    instrs: Vec<(u64, Vec<u64>)>,
    instr_index: HashMap<u64, usize>,
}

impl Node {
    /// `pmcpl_ct_instr_add`.
    fn instr_add(&mut self, pmc: usize, off: u64, v: u64) {
        let i = match self.instr_index.get(&off) {
            Some(&i) => i,
            None => {
                self.instrs.push((off, Vec::new()));
                self.instr_index.insert(off, self.instrs.len() - 1);
                self.instrs.len() - 1
            }
        };
        bump(&mut self.instrs[i].1, pmc, v);
    }
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

/// `PMC_CALLCHAIN_DEPTH_MAX`: the deepest path the top view follows.
const TOP_MAX_COLUMNS: usize = 512;
/// `PMCPL_CT_MAXLINE`: the most rows the top view lays out.
const TOP_MAX_LINES: usize = 1024;

/// How the top view is drawn: the display's size, the threshold and
/// the attribute of a share.
pub struct TopStyle<'a> {
    /// Lines the display has (`pmcstat_displayheight`).
    pub height: usize,
    /// Columns the display has (`pmcstat_displaywidth`).
    pub width: usize,
    /// `-f threshold=`, in percent.
    pub threshold: f64,
    /// Functions on a path under the threshold show as `.`
    /// (`skiplink`).
    pub skiplink: bool,
    /// The text with the colour or emphasis of a share.
    pub attr: &'a dyn Fn(f64, &str) -> String,
}

/// The calltree of a log's samples.
#[derive(Debug)]
pub struct CallTree {
    nodes: Vec<Node>,
    index: HashMap<(ImageId, u64), u32>,
    inline_index: HashMap<(ImageId, u64, String, String), u32>,
    call_id: Vec<u64>,
    path: Vec<u32>,
    /// Whether the sampled instructions are kept (`pa_ctdumpinstr`:
    /// for `-F`, not for `-T`).
    instrs: bool,
}

impl CallTree {
    /// An empty tree (`pmcpl_ct_init`); `instrs` keeps each function's
    /// sampled instructions.
    pub fn new(instrs: bool) -> CallTree {
        CallTree {
            nodes: vec![Node::default()],
            index: HashMap::default(),
            inline_index: HashMap::default(),
            call_id: Vec::new(),
            path: Vec::new(),
            instrs,
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

    /// The node of code inlined into the function of `image` at `func`,
    /// by its source file and name, made if new.
    fn inline_node(&mut self, image: ImageId, func: u64, file: &str, name: &str) -> u32 {
        let key = (image, func, file.to_owned(), name.to_owned());
        if let Some(&n) = self.inline_index.get(&key) {
            return n;
        }
        let n = u32::try_from(self.nodes.len()).expect("fewer than 2^32 nodes");
        self.nodes.push(Node {
            func: Some((image, func)),
            inline: Some((key.2.clone(), key.3.clone())),
            ..Node::default()
        });
        self.inline_index.insert(key, n);
        n
    }

    /// `pmcpl_ct_node_update`: `v` more samples of PMC `pmc` on the arc
    /// from `parent` to `child`; `estimate` counts the calls.
    fn arc(&mut self, parent: u32, child: u32, pmc: usize, v: u64, estimate: bool) {
        let call = at(&self.call_id, pmc);
        let p = &mut self.nodes[parent as usize];
        match p.arc_index.get(&child) {
            Some(&i) => {
                let a = &mut p.arcs[i];
                bump(&mut a.samples, pmc, v);
                if estimate {
                    if call.saturating_sub(at(&a.last_call, pmc)) > 1 {
                        a.calls += 1;
                    }
                    if a.last_call.len() <= pmc {
                        a.last_call.resize(pmc + 1, 0);
                    }
                    a.last_call[pmc] = call;
                }
            }
            None => {
                let mut samples = Vec::new();
                bump(&mut samples, pmc, v);
                let mut last_call = Vec::new();
                if estimate {
                    last_call.resize(pmc + 1, 0);
                    last_call[pmc] = call;
                }
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

    /// `pmcpl_ct_process`: adds a sample's chain.
    pub fn add(&mut self, a: &mut Analysis, s: &Sample<'_>) {
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
            self.arc(parent, n, pmc, 1, true);
            parent = n;
        }
        let leaf = &mut self.nodes[parent as usize];
        bump(&mut leaf.self_cost, pmc, 1);
        if self.instrs {
            leaf.instr_add(pmc, frames[0].2, 1);
        }
        self.path = path;
    }

    /// The samples of each PMC on the root's arcs
    /// (`pmcpl_ct_samples_root`).
    fn root_samples(&self, npmc: usize) -> Vec<u64> {
        (0..npmc)
            .map(|i| self.nodes[0].arcs.iter().map(|r| at(&r.samples, i)).sum())
            .collect()
    }

    /// `pmcpl_ct_expand_inline`: moves the sampled instructions of
    /// inlined code to `inner@outer` nodes, reporting each on `report`
    /// at verbosity 2 and up.
    fn expand_inline(&mut self, a: &mut Analysis, report: &mut dyn Write) -> io::Result<()> {
        if !self.instrs {
            return Ok(());
        }
        let npmc = a.pmcs.len();
        for n in 1..self.nodes.len() {
            let (Some((image, func)), None) = (self.nodes[n].func, &self.nodes[n].inline) else {
                continue;
            };
            let img = &mut a.images[image as usize];
            // The function as the DWARF information names its start.
            let Some(outer) = img.function_line(&a.strings, func) else {
                continue;
            };
            for i in 0..self.nodes[n].instrs.len() {
                let off = self.nodes[n].instrs[i].0;
                let img = &mut a.images[image as usize];
                let Some(inner) = img.function_line(&a.strings, off) else {
                    continue;
                };
                if inner.function == outer.function {
                    continue;
                }
                if a.opts.verbosity >= 2 {
                    writeln!(
                        report,
                        "WARNING: inlined function at {} {} in {}",
                        pointer(img.vaddr.wrapping_add(off)),
                        inner.function,
                        outer.function
                    )?;
                }
                let name = format!("{}@{}", inner.function, outer.function);
                let child = self.inline_node(image, func, &inner.place.file, &name);
                for pmc in 0..npmc {
                    let v = at(&self.nodes[n].instrs[i].1, pmc);
                    if v == 0 {
                        continue;
                    }
                    self.nodes[child as usize].instr_add(pmc, off, v);
                    self.arc(n as u32, child, pmc, v, false);
                    let node = &mut self.nodes[n];
                    if let Some(c) = node.self_cost.get_mut(pmc) {
                        *c -= v;
                    }
                    node.instrs[i].1[pmc] = 0;
                }
            }
        }
        report.flush()
    }

    /// `pmcpl_ct_print`: the whole tree in the callgrind format.
    fn print(&self, a: &mut Analysis, out: &mut dyn Write, summary: &[u64]) -> io::Result<()> {
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
            text.push_str(&format!(" {}", at(summary, i)));
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
                    let (file, line, name) = match &node.inline {
                        Some((file, name)) => (file.clone(), 0, name.clone()),
                        None => describe(a, image, func),
                    };
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
                let child = &self.nodes[arc.child as usize];
                let (cimage, cfunc) = child.func.expect("only the root has no function");
                let (cfile, cline, cname) = match &child.inline {
                    Some((file, name)) => (file.clone(), 0, name.clone()),
                    None => describe(a, cimage, cfunc),
                };
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
                out.write_all(text.as_bytes())?;
                text.clear();
            }
        }
        out.write_all(text.as_bytes())?;
        out.flush()
    }

    /// `pmcpl_ct_topdisplay`: the view of PMC number `pmc`, its rows
    /// separated by newlines, the last without one.
    pub fn top_display(&self, a: &Analysis, pmc: usize, style: &TopStyle<'_>) -> String {
        let total = self.root_samples(a.pmcs.len().max(pmc + 1))[pmc];
        // FreeBSD's threshold is a float.
        let threshold = f64::from(style.threshold as f32);
        let mut text = format!("{:>5.5} {}\n", "%SAMP", "CALLTREE");
        let mut layout = TopLayout {
            tree: self,
            pmc,
            total,
            threshold,
            color: vec![Color::White; self.nodes.len()],
            path: Vec::new(),
            rows: Vec::new(),
        };
        if layout.dump(0, 0) {
            text.push_str("...\n");
        }
        let rows = layout.rows;
        text.push_str(&self.print_top(a, pmc, total, threshold, &rows, style));
        text
    }

    /// `pmcpl_ct_node_printtop`: the rows, the most sampled first, each
    /// wrapped at the display's width; as many as fit in its height.
    fn print_top(
        &self,
        a: &Analysis,
        pmc: usize,
        total: u64,
        threshold: f64,
        rows: &[Vec<u32>],
        style: &TopStyle<'_>,
    ) -> String {
        // FreeBSD's shares are floats.
        let share = |n: u64| (n as f64 * 100.0 / total as f64) as f32 as f64;
        let mut sums: Vec<(u64, usize)> = rows
            .iter()
            .enumerate()
            .map(|(y, row)| {
                let sum = row
                    .iter()
                    .map(|&n| at(&self.nodes[n as usize].self_cost, pmc))
                    .sum();
                (sum, y)
            })
            .collect();
        // The most sampled first; rows of equal sums keep their order
        // (FreeBSD's qsort leaves it unspecified).
        sums.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut maxy = style.height as i64 - 2;
        let mut text = String::new();
        let mut y = 0;
        while (y as i64) < maxy {
            let Some(&(sum, index)) = sums.get(y) else {
                break;
            };
            let row = &rows[index];
            if y > 0 {
                text.push('\n');
            }
            let v = share(sum);
            text.push_str(&(style.attr)(v, &format!("{:>5.5} ", format!("{v:.1}"))));
            let indent = 5 + 1;
            let mut width = indent;
            for (x, &n) in row.iter().enumerate() {
                let node = &self.nodes[n as usize];
                let (image, func) = node.func.expect("rows hold functions");
                let v = share(at(&node.self_cost, pmc));
                // snprintf's lengths are those of the whole text, not of
                // what fit in FreeBSD's buffers.
                let (vs, vs_len) = if v > threshold {
                    let vs = format!("({v:.1}%)");
                    let len = vs.len();
                    (truncate(&vs, 9).to_owned(), len)
                } else {
                    (String::new(), 0)
                };
                let (ns, is);
                let (ns_len, is_len);
                if style.skiplink && v <= threshold {
                    ns = ".".to_owned();
                    ns_len = 1;
                    is = String::new();
                    is_len = 0;
                } else {
                    let img = &a.images[image as usize];
                    let name = match img.symbols.search(func) {
                        Some(sym) => a.string(sym.name).to_owned(),
                        None => pointer(func),
                    };
                    ns_len = name.len();
                    ns = truncate(&name, 29).to_owned();
                    let image_changed = x == 0 || {
                        let prev = &self.nodes[row[x - 1] as usize];
                        prev.func.map(|f| f.0) != Some(image)
                    };
                    if image_changed {
                        let name = format!("@{}", img.name.map_or("", |p| a.string(p)));
                        is_len = name.len();
                        is = truncate(&name, 19).to_owned();
                    } else {
                        is = String::new();
                        is_len = 0;
                    }
                    width += ns_len + is_len + vs_len + 1;
                }
                if width >= style.width {
                    maxy -= 1;
                    if y as i64 >= maxy {
                        break;
                    }
                    text.push('\n');
                    text.push_str(&" ".repeat(indent));
                    width = indent + ns_len + is_len + vs_len;
                }
                text.push_str(&(style.attr)(v, &format!("{ns}{is}{vs} ")));
            }
            y += 1;
        }
        text
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Color {
    White,
    Grey,
    Black,
}

/// `pmcpl_ct_node_dumptop`'s state: the rows of the top view, each the
/// path of nodes from a child of the root.
struct TopLayout<'t> {
    tree: &'t CallTree,
    pmc: usize,
    total: u64,
    threshold: f64,
    color: Vec<Color>,
    path: Vec<u32>,
    rows: Vec<Vec<u32>>,
}

impl TopLayout<'_> {
    /// Whether an arc's samples take it into the view.
    fn followed(&self, arc: &Arc) -> bool {
        let n = at(&arc.samples, self.pmc);
        n != 0 && n as f64 * 100.0 / self.total as f64 > self.threshold
    }

    /// Lays out node `n` at column `x` and what it calls; true when the
    /// view is full (FreeBSD then shows `...`).
    fn dump(&mut self, n: u32, x: usize) -> bool {
        if self.color[n as usize] == Color::Grey {
            return false;
        }
        if x >= TOP_MAX_COLUMNS {
            return true;
        }
        self.path.truncate(x);
        self.path.push(n);
        let node = &self.tree.nodes[n as usize];
        // A row ends where no arc is followed to a node off its path.
        // FreeBSD's counts an arc of the node to itself (recursion) as
        // one that goes on, and then loses the row: the hottest path of
        // a recursive function was never shown.
        let terminal = !node.arcs.iter().any(|arc| {
            arc.child != n && self.color[arc.child as usize] != Color::Grey && self.followed(arc)
        });
        if terminal {
            if self.rows.len() >= TOP_MAX_LINES {
                return true;
            }
            // The root alone is no row.
            if x > 0 {
                self.rows.push(self.path[1..].to_vec());
            }
            return false;
        }
        self.color[n as usize] = Color::Grey;
        for arc in &node.arcs {
            if self.followed(arc) && self.dump(arc.child, x + 1) {
                self.color[n as usize] = Color::Black;
                return true;
            }
        }
        self.color[n as usize] = Color::Black;
        false
    }
}

/// The `-F` output.
pub struct CalltreePlugin {
    tree: CallTree,
    out: Box<dyn Write>,
    report: Box<dyn Write>,
}

impl CalltreePlugin {
    /// A plugin writing the profile into `out` and its reports into
    /// `report` (the print file).
    pub fn new(out: Box<dyn Write>, report: Box<dyn Write>) -> CalltreePlugin {
        CalltreePlugin {
            tree: CallTree::new(true),
            out,
            report,
        }
    }
}

impl Plugin for CalltreePlugin {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        self.tree.add(a, s);
    }

    fn shutdown(&mut self, a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        let summary = self.tree.root_samples(a.pmcs.len());
        self.tree.expand_inline(a, &mut *self.report)?;
        self.tree.print(a, &mut *self.out, &summary)
    }
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
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

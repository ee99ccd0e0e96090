//! The call graph plugin (pmcpl_callgraph.c): `-G file`, and the
//! aggregation under `-g`, `-T` and the other outputs that need call
//! chains resolved to functions.
//!
//! Each sample's chain is turned into a path from the sampled function
//! (a top-level node per PMC) through its callers, each node an (image,
//! function) pair with the samples that went through it; a PC in no
//! known function keeps its offset in the image. The printed form is
//! FreeBSD's, character for character: per PMC (the newest first) a
//! header line, then each top-level node with its callers indented one
//! space per level, the share of the parent's samples (`100.0%` when all
//! of them, else `%05.2f%%`), the count in a 12-character field, the
//! name, and ` @ path` whenever the image changes from the line before.
//! Nodes of equal counts keep the order in which they were first seen
//! (FreeBSD's qsort leaves their order unspecified).

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use libpmcstat::libpmcstat_logging::{Analysis, ImageId, Plugin, Sample};

/// `DEFAULT_CALLGRAPH_DEPTH`.
pub const DEFAULT_DEPTH: usize = 16;

/// A node: an (image, function) pair on a path of callers.
#[derive(Debug, Clone)]
pub struct CgNode {
    /// The image.
    pub image: ImageId,
    /// The function's start (or the PC) as an offset in the image.
    pub func: u64,
    /// Samples through this node.
    pub count: u32,
    /// Callers, in the order first seen.
    pub children: Vec<u32>,
}

/// How function names are resolved at the top of a chain.
#[derive(Debug, Clone, Copy, Default)]
pub struct CgOptions {
    /// `-z`: the deepest level kept.
    pub depth: usize,
    /// `-I`: keep the sampled PC's offset instead of its function.
    pub show_offset: bool,
    /// `-A`: do not resolve the sampled PC's function.
    pub skip_top_resolution: bool,
}

/// The call graph of a log.
#[derive(Debug, Default)]
pub struct CallGraph {
    /// Every node.
    pub nodes: Vec<CgNode>,
    /// Top-level nodes by (PMC id, image, function), in order first seen.
    top: HashMap<(u32, ImageId, u64), u32>,
    top_order: Vec<(u32, u32)>,
    /// A node's caller by (node, image, function).
    callers: HashMap<(u32, ImageId, u64), u32>,
    opts: CgOptions,
}

impl CallGraph {
    /// An empty graph.
    pub fn new(opts: CgOptions) -> CallGraph {
        CallGraph {
            opts,
            ..CallGraph::default()
        }
    }

    /// Options for the samples to come.
    pub fn set_options(&mut self, opts: CgOptions) {
        self.opts = opts;
    }

    fn node(&mut self, image: ImageId, func: u64) -> u32 {
        let id = u32::try_from(self.nodes.len()).expect("fewer than 2^32 nodes");
        self.nodes.push(CgNode {
            image,
            func,
            count: 0,
            children: Vec::new(),
        });
        id
    }

    /// `pmcstat_cgnode_hash_lookup_pc`: the top-level node of `pc` for
    /// `pmcid`, or None when no map holds the PC.
    fn top_node(&mut self, a: &mut Analysis, s: &Sample<'_>, pmcid: u32) -> Option<u32> {
        let map = a.find_map(s.pid, s.pcs[0], s.usermode)?;
        let mut func = a.image_offset(&map, s.pcs[0]);
        if !(self.opts.skip_top_resolution || self.opts.show_offset) {
            match a.images[map.image as usize].symbols.search(func) {
                Some(sym) => func = sym.start,
                None => a.stats.samples_unknown_function += 1,
            }
        }
        let key = (pmcid, map.image, func);
        if let Some(&n) = self.top.get(&key) {
            return Some(n);
        }
        let n = self.node(map.image, func);
        self.top.insert(key, n);
        self.top_order.push((pmcid, n));
        Some(n)
    }

    /// The caller of `parent` at (image, func), made if new.
    fn caller(&mut self, parent: u32, image: ImageId, func: u64) -> u32 {
        if let Some(&c) = self.callers.get(&(parent, image, func)) {
            return c;
        }
        let c = self.node(image, func);
        self.callers.insert((parent, image, func), c);
        self.nodes[parent as usize].children.push(c);
        c
    }

    /// `pmcpl_cg_process`: adds a sample's chain.
    pub fn add(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        if s.pcs.is_empty() {
            return;
        }
        let pmcid = a.pmcs[s.pmc].pmcid;
        let Some(mut parent) = self.top_node(a, s, pmcid) else {
            a.stats.callchain_dubious_frames += 1;
            a.pmcs[s.pmc].dubious_frames += 1;
            return;
        };
        self.nodes[parent as usize].count += 1;
        // A kernel chain that goes on into user frames (a full capture)
        // is resolved against the process from there on.
        let depth = self.opts.depth.max(1);
        for (pc, map) in a.chain_maps(s).take(depth).skip(1) {
            let Some(map) = map else { continue };
            let mut func = a.image_offset(&map, pc);
            if let Some(sym) = a.images[map.image as usize].symbols.search(func) {
                func = sym.start;
            }
            let child = self.caller(parent, map.image, func);
            self.nodes[child as usize].count += 1;
            parent = child;
        }
    }

    /// The top-level nodes of `pmcid`, the most sampled first (ties in
    /// the order first seen), and their total.
    pub fn top_nodes(&self, pmcid: u32) -> (Vec<u32>, u64) {
        let mut tops: Vec<u32> = self
            .top_order
            .iter()
            .filter(|(p, _)| *p == pmcid)
            .map(|&(_, n)| n)
            .collect();
        let total = tops
            .iter()
            .map(|&n| u64::from(self.nodes[n as usize].count))
            .sum();
        tops.sort_by(|x, y| {
            self.nodes[*y as usize]
                .count
                .cmp(&self.nodes[*x as usize].count)
        });
        (tops, total)
    }

    /// A node's callers, the most sampled first (ties in the order first
    /// seen).
    pub fn sorted_children(&self, n: u32) -> Vec<u32> {
        let mut c = self.nodes[n as usize].children.clone();
        c.sort_by(|x, y| {
            self.nodes[*y as usize]
                .count
                .cmp(&self.nodes[*x as usize].count)
        });
        c
    }

    /// The name a node prints: its function, or the address (`%p`).
    pub fn name(&self, a: &Analysis, n: u32) -> String {
        let node = &self.nodes[n as usize];
        a.function_name(node.image, node.func)
    }

    /// `pmcstat_callgraph_print`: the whole graph, FreeBSD's text.
    pub fn print(&self, a: &Analysis, out: &mut dyn Write) -> io::Result<()> {
        for pmc in a.pmcs_listed() {
            let pr = &a.pmcs[pmc];
            let (tops, total) = self.top_nodes(pr.pmcid);
            if tops.is_empty() {
                continue;
            }
            writeln!(out, "@ {} [{total} samples]\n", a.string(pr.name))?;
            for n in tops {
                let mut previous = None;
                self.print_node(a, out, n, 0, total, &mut previous)?;
                writeln!(out)?;
            }
        }
        Ok(())
    }

    fn print_node(
        &self,
        a: &Analysis,
        out: &mut dyn Write,
        n: u32,
        depth: usize,
        total: u64,
        previous: &mut Option<libpmcstat::libpmcstat_string::IStr>,
    ) -> io::Result<()> {
        let node = &self.nodes[n as usize];
        let mut line = String::with_capacity(64);
        line.push_str(&" ".repeat(depth));
        line.push_str(&percent(u64::from(node.count), total));
        let count = format!(" [{}] ", node.count);
        line.push_str(&count);
        if count.len() < 12 {
            line.push_str(&" ".repeat(12 - count.len()));
        }
        line.push_str(&" ".repeat(depth));
        line.push_str(&self.name(a, n));
        let image = &a.images[node.image as usize];
        if *previous != image.fullpath {
            *previous = image.fullpath;
            let path = image.fullpath.map_or("", |p| a.string(p));
            line.push_str(" @ ");
            line.push_str(path);
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
        for c in self.sorted_children(n) {
            self.print_node(a, out, c, depth + 1, u64::from(node.count), previous)?;
        }
        Ok(())
    }
}

/// A node's share of its parent, as the call graph prints it.
pub fn percent(count: u64, total: u64) -> String {
    if count == total {
        "100.0% ".to_owned()
    } else {
        format!("{:05.2}% ", 100.0 * count as f64 / total as f64)
    }
}

/// The `-G` output: the graph printed into a file at the log's end.
pub struct CallGraphPlugin {
    /// The graph.
    pub graph: CallGraph,
    out: Box<dyn Write>,
}

impl CallGraphPlugin {
    /// A plugin that prints into `out`.
    pub fn new(opts: CgOptions, out: Box<dyn Write>) -> CallGraphPlugin {
        CallGraphPlugin {
            graph: CallGraph::new(opts),
            out,
        }
    }
}

impl Plugin for CallGraphPlugin {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        self.graph.add(a, s);
    }

    fn shutdown(&mut self, a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        self.graph.print(a, &mut *self.out)?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_as_printf_writes_them() {
        assert_eq!(percent(3, 3), "100.0% ");
        assert_eq!(percent(1, 3), "33.33% ");
        assert_eq!(percent(1, 40), "02.50% ");
        assert_eq!(percent(0, 7), "00.00% ");
        assert_eq!(percent(19998, 20000), "99.99% ");
        // 99.995% rounds up to six characters, as C's %05.2f gives it.
        assert_eq!(percent(19999, 20000), "100.00% ");
    }
}

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
    /// Chains already added, by their key ([`CallGraph::chain_key`]):
    /// the nodes each went through. A chain seen again adds to the same
    /// nodes without resolving its PCs again, as long as no record
    /// changed the maps since ([`Analysis::maps_generation`]).
    paths: HashMap<Box<[u64]>, ChainPath>,
    paths_generation: u64,
    /// Look-ups and hits since `paths` filled up; `paths_off` once they
    /// showed that it does not pay (see [`CallGraph::add`]).
    full_lookups: u32,
    full_hits: u32,
    paths_off: bool,
    /// Never remember (the tests' reference).
    forget: bool,
    /// The key of the current sample and the nodes it went through
    /// (kept to reuse their memory).
    key: Vec<u64>,
    path: Vec<u32>,
    /// Chains resolved PC by PC (not found in `paths`).
    resolutions: u64,
}

/// What adding a chain did, to do again for the same chain.
#[derive(Debug)]
struct ChainPath {
    /// The top-level node, then each caller's; none when no map held the
    /// sampled PC (a dubious frame).
    nodes: Box<[u32]>,
    /// The sampled PC was in no function (`samples_unknown_function`).
    unknown_function: bool,
}

impl ChainPath {
    fn dubious() -> ChainPath {
        ChainPath {
            nodes: Box::default(),
            unknown_function: false,
        }
    }
}

/// The most chains remembered: memory stays bounded whatever the log
/// (about 8 MiB of 16-frame chains). Once full, only the chains already
/// remembered are (the first seen, which in a profile are mostly the
/// hot ones), so that a log of ever new chains pays one failed look-up
/// per sample, not an allocation and a clear.
const MAX_PATHS: usize = 1 << 15;
/// How many look-ups in a full memory decide whether it still pays.
const JUDGE_EVERY: u32 = 1 << 16;

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
        self.paths.clear();
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
        if self.paths_generation != a.maps_generation {
            self.paths.clear();
            self.paths_generation = a.maps_generation;
            (self.full_lookups, self.full_hits, self.paths_off) = (0, 0, self.forget);
        }
        let depth = self.opts.depth.max(1);
        if !self.paths_off && self.remembered(a, s, depth) {
            return;
        }
        let resolved = self.resolve(a, s, depth);
        if !self.paths_off && self.paths.len() < MAX_PATHS {
            let path = match resolved {
                Some(unknown_function) => ChainPath {
                    nodes: self.path.as_slice().into(),
                    unknown_function,
                },
                None => ChainPath::dubious(),
            };
            self.paths.insert(self.key.as_slice().into(), path);
        }
    }

    /// Adds a chain by resolving each of its PCs, leaving the nodes it
    /// went through in `self.path`; whether the sampled PC was in no
    /// function, or None for a chain whose sampled PC no map holds.
    /// (Out of line: inlined into [`CallGraph::add`], the loop ran a
    /// quarter slower.)
    #[inline(never)]
    fn resolve(&mut self, a: &mut Analysis, s: &Sample<'_>, depth: usize) -> Option<bool> {
        self.resolutions += 1;
        let pmcid = a.pmcs[s.pmc].pmcid;
        let unknown_before = a.stats.samples_unknown_function;
        let Some(mut parent) = self.top_node(a, s, pmcid) else {
            a.stats.callchain_dubious_frames += 1;
            a.pmcs[s.pmc].dubious_frames += 1;
            return None;
        };
        self.path.clear();
        self.path.push(parent);
        self.nodes[parent as usize].count += 1;
        // A kernel chain that goes on into user frames (a full capture)
        // is resolved against the process from there on.
        for (pc, map) in a.chain_maps(s).take(depth).skip(1) {
            let Some(map) = map else { continue };
            let mut func = a.image_offset(&map, pc);
            if let Some(sym) = a.images[map.image as usize].symbols.search(func) {
                func = sym.start;
            }
            let child = self.caller(parent, map.image, func);
            self.nodes[child as usize].count += 1;
            self.path.push(child);
            parent = child;
        }
        Some(a.stats.samples_unknown_function != unknown_before)
    }

    /// Adds a chain seen before along its path; false if it is new.
    /// When the memory is full and under half of the chains since were
    /// in it (a log of ever new chains), it is dropped and no longer
    /// looked in until the maps change: there it would cost a look-up
    /// per sample and crowd the graph out of the processor's caches.
    fn remembered(&mut self, a: &mut Analysis, s: &Sample<'_>, depth: usize) -> bool {
        self.chain_key(s, depth);
        let full = self.paths.len() >= MAX_PATHS;
        let Some(path) = self.paths.get(self.key.as_slice()) else {
            if full {
                self.full_lookups += 1;
                self.judge_paths();
            }
            return false;
        };
        if path.nodes.is_empty() {
            a.stats.callchain_dubious_frames += 1;
            a.pmcs[s.pmc].dubious_frames += 1;
        }
        for &n in path.nodes.iter() {
            self.nodes[n as usize].count += 1;
        }
        if path.unknown_function {
            a.stats.samples_unknown_function += 1;
        }
        if full {
            self.full_lookups += 1;
            self.full_hits += 1;
            self.judge_paths();
        }
        true
    }

    /// After every [`JUDGE_EVERY`] look-ups in a full memory: whether it
    /// still pays.
    fn judge_paths(&mut self) {
        if self.full_lookups < JUDGE_EVERY {
            return;
        }
        if self.full_hits < self.full_lookups / 2 {
            self.paths = HashMap::default();
            self.paths_off = true;
        }
        (self.full_lookups, self.full_hits) = (0, 0);
    }

    /// The key of a sample's chain in [`CallGraph::paths`]: its PMC
    /// record, process and mode, and the PCs that the graph uses (the
    /// first `depth`).
    fn chain_key(&mut self, s: &Sample<'_>, depth: usize) {
        self.key.clear();
        self.key.push(s.pmc as u64);
        self.key
            .push(u64::from(s.pid as u32) << 1 | u64::from(s.usermode));
        self.key.extend_from_slice(&s.pcs[..depth.min(s.pcs.len())]);
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

/// The call graph that `-g` makes before every other plugin (FreeBSD's
/// `pa_pplugin`): it counts the unknown functions and dubious frames of
/// the statistics, gives the gprof profiles their arcs, and is printed
/// only when `-G` or `-F` was given too (`FLAG_DO_CALLGRAPHS`), into
/// their file, after the other plugin's output.
pub struct PrimaryCallGraph {
    graph: std::rc::Rc<std::cell::RefCell<CallGraph>>,
    out: Option<Box<dyn Write>>,
}

impl PrimaryCallGraph {
    /// A graph shared with the gprof plugin, printed into `out` if given.
    pub fn new(
        graph: std::rc::Rc<std::cell::RefCell<CallGraph>>,
        out: Option<Box<dyn Write>>,
    ) -> PrimaryCallGraph {
        PrimaryCallGraph { graph, out }
    }
}

impl Plugin for PrimaryCallGraph {
    fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
        self.graph.borrow_mut().add(a, s);
    }

    fn shutdown(&mut self, a: &mut Analysis, _mapfile: Option<&mut dyn Write>) -> io::Result<()> {
        match self.out.as_mut() {
            Some(out) => {
                self.graph.borrow().print(a, &mut **out)?;
                out.flush()
            }
            None => Ok(()),
        }
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

    use libpmcstat::libpmcstat_logging::Options;
    use pmc::pmclog::{PMCLOG_FD_NONE, Parser, PmclogEv, PmclogState};
    use std::cell::RefCell;
    use std::rc::Rc;
    use uapi::pmclog::{PcList, PmclogBody as B, PmclogRecord};

    struct Shared(Rc<RefCell<CallGraph>>);
    type NodeValues = (u32, u64, u32, Vec<u32>);
    impl Plugin for Shared {
        fn process(&mut self, a: &mut Analysis, s: &Sample<'_>) {
            self.0.borrow_mut().add(a, s);
        }
    }

    /// An analysis whose call graph remembers chains, or not.
    struct Run {
        a: Analysis,
        graph: Rc<RefCell<CallGraph>>,
        plugins: Vec<Box<dyn Plugin>>,
    }
    impl Run {
        fn new(remember: bool) -> Run {
            let mut g = CallGraph::new(CgOptions {
                depth: 6,
                ..CgOptions::default()
            });
            (g.paths_off, g.forget) = (!remember, !remember);
            let graph = Rc::new(RefCell::new(g));
            Run {
                a: Analysis::new(Options::default()),
                plugins: vec![Box::new(Shared(graph.clone()))],
                graph,
            }
        }
        fn feed(&mut self, record: &[u8]) {
            let mut parser = Parser::new(PMCLOG_FD_NONE);
            parser.feed(record);
            let mut ev = PmclogEv::zeroed();
            assert_eq!(parser.read(&mut ev), PmclogState::Ok);
            self.a.process_event(&ev, &mut self.plugins);
        }
        /// The graph as comparable values (each node, the top-level
        /// order), and the statistics.
        fn result(&self) -> (Vec<NodeValues>, Vec<(u32, u32)>, String) {
            let g = self.graph.borrow();
            let nodes = g
                .nodes
                .iter()
                .map(|n| (n.image, n.func, n.count, n.children.clone()))
                .collect();
            (nodes, g.top_order.clone(), format!("{:?}", self.a.stats))
        }
    }

    /// The same records to both runs.
    struct Both(Run, Run);
    impl Both {
        fn feed(&mut self, body: B<'_>) {
            let rec = PmclogRecord { tsc: 1, body };
            let mut b = vec![0u8; rec.encoded_len()];
            rec.encode(&mut b).unwrap();
            self.0.feed(&b);
            self.1.feed(&b);
        }
        /// `n` samples of `pid` from chains of a few seeds: PCs in
        /// `text`, some callers' past it (in no map until something is
        /// mapped there), one in sixteen in kernel mode (in no map).
        fn samples(&mut self, n: u32, pid: u32, text: (usize, usize), x: &mut u64) {
            for _ in 0..n {
                *x = x.wrapping_mul(0x2545_F491_4F6C_DD1D).wrapping_add(1);
                let mut y = ((*x >> 40) % 24) | 1;
                let pcs: Vec<usize> = (0..8)
                    .map(|i| {
                        y = y
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let span = if i > 0 && y >> 60 < 2 { 0x20_0000 } else { 0 };
                        text.0 + ((y >> 20) as usize) % (text.1 - text.0 + span)
                    })
                    .collect();
                self.feed(B::Callchain {
                    pid,
                    tid: 1,
                    pmcid: 0x100,
                    cpuflags: u32::from((*x >> 30) % 16 != 0),
                    pcs: PcList::from_words(&pcs),
                });
            }
        }
    }

    /// Chains met again are added from memory; across execs, maps in and
    /// out and forks the graph and the statistics stay exactly what
    /// resolving every PC gives.
    #[test]
    fn remembered_chains_add_what_resolving_them_adds() {
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap().as_bytes();
        let base = 0x1000_0000usize;
        let mut both = Both(Run::new(true), Run::new(false));
        both.feed(B::Pmcallocatedyn {
            pmcid: 0x100,
            event: 0,
            flags: 0,
            evname: b"ev",
        });
        both.feed(B::Procexec {
            pid: 42,
            pmcid: 0x100,
            base: 0,
            dyn_base: base,
            pathname: exe,
        });
        let text = {
            let m = both.0.a.procs[&42].maps[0];
            (m.low as usize, m.high as usize)
        };
        let mut x = 7u64;
        both.samples(300, 42, text, &mut x);
        both.feed(B::MapIn {
            pid: 42,
            start: text.1,
            pathname: b"/lib/x86_64-linux-gnu/libc.so.6",
        });
        both.samples(300, 42, text, &mut x);
        both.feed(B::MapOut {
            pid: 42,
            start: text.0,
            end: text.0 + (text.1 - text.0) / 2,
        });
        both.samples(300, 42, text, &mut x);
        both.feed(B::Procfork {
            oldpid: 42,
            newpid: 43,
        });
        both.samples(300, 43, text, &mut x);
        both.feed(B::Procexec {
            pid: 42,
            pmcid: 0x100,
            base: 0,
            dyn_base: base + 0x1000,
            pathname: exe,
        });
        both.samples(300, 42, text, &mut x);
        assert_eq!(both.0.result(), both.1.result());
        // The memory served: far fewer chains were resolved PC by PC.
        let (r, f) = (
            both.0.graph.borrow().resolutions,
            both.1.graph.borrow().resolutions,
        );
        assert!(f > 1200 && r < f / 4, "resolved {r} of {f}");
    }
}

//! The analysis of a log (`-R file` with `-g`, `-G`, `-F`, `-m`, `-a`
//! and the outputs this pmcstat adds): the log is read to its end, each
//! event goes through libpmcstat's [`Analysis`], which hands the samples
//! to the chosen plugins, and the plugins write their files at the end
//! (pmcstat_log.c's `pmcstat_process_log` in analysis mode and
//! `pmcstat_shutdown_logging`).

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use libpmcstat::libpmcstat_logging::{Analysis, Options, Plugin};
use pmc::pmclog::{Parser, PmclogEv, PmclogState};
use pmctool::Exit;
use pmctool::sysexits::{EX_DATAERR, EX_OSERR};

use crate::pmcpl_annotate::AnnotatePlugin;
use crate::pmcpl_annotate_cg::AnnotateCgPlugin;
use crate::pmcpl_callgraph::{CallGraph, CallGraphPlugin, CgOptions, PrimaryCallGraph};
use crate::pmcpl_calltree::CalltreePlugin;
use crate::pmcpl_flamegraph::FlameGraphPlugin;
use crate::pmcpl_folded::FoldedPlugin;
use crate::pmcpl_gprof::GprofPlugin;
use crate::pmcpl_pprof::PprofPlugin;
use crate::pmcpl_summary::SummaryPlugin;
use crate::{PROGRAM, errx};

/// FreeBSD's analysis plugins (`pa_plugin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PluginKind {
    /// None chosen: `-R` prints the log.
    #[default]
    None,
    /// `-G` (and `-T`).
    CallGraph,
    /// `-g`.
    Gprof,
    /// `-F`.
    CallTree,
    /// `-m`.
    Annotate,
    /// `-a`.
    AnnotateCg,
}

/// What the analysis options asked for.
#[derive(Debug, Clone, Default)]
pub struct AnalysisArgs {
    /// The analysis plugin.
    pub plugin: PluginKind,
    /// The file named by `-G` ("-": the print file).
    pub graphfile: Option<String>,
    /// `-z`.
    pub depth: Option<usize>,
    /// `-I`.
    pub show_offset: bool,
    /// `-A`.
    pub skip_top_resolution: bool,
    /// `-i`.
    pub tid: Option<u32>,
    /// `-M`.
    pub mapfile: Option<String>,
    /// `-r`.
    pub fsroot: String,
    /// `-k`.
    pub kerneldir: Option<String>,
    /// `-f threshold=`: the share below which outputs leave nodes out.
    pub threshold: f64,
    /// `-f skiplink=N` after `-F`: the calltree view shows functions
    /// under the threshold as `.`.
    pub skiplink: bool,
    /// `-x file`: folded stacks (an extension).
    pub folded: Option<String>,
    /// `-X file`: a flame graph SVG (an extension).
    pub flamegraph: Option<String>,
    /// `-j file`: a pprof profile (an extension).
    pub pprof: Option<String>,
    /// `-y file`: functions and source lines (an extension).
    pub summary: Option<String>,
    /// `-D`: where `-g` writes its directories.
    pub samplesdir: Option<String>,
    /// `-e`: 64-bit gprof counters.
    pub wide_gprof: bool,
    /// `-g` was given (`FLAG_DO_GPROF`), whatever plugin came last.
    pub gprof_asked: bool,
    /// `-G` or `-F` was given (`FLAG_DO_CALLGRAPHS`).
    pub callgraph_asked: bool,
    /// `-m` or `-a` was given (`FLAG_DO_ANNOTATE`).
    pub annotate_asked: bool,
}

impl AnalysisArgs {
    /// True when a plugin or an extension output was asked for
    /// (`FLAG_DO_ANALYSIS`).
    pub fn any(&self) -> bool {
        self.plugin != PluginKind::None
            || self.folded.is_some()
            || self.flamegraph.is_some()
            || self.pprof.is_some()
            || self.summary.is_some()
    }
}

/// An output file: "-" is the print file (given), else created.
fn output(path: &str, print: impl FnOnce() -> Box<dyn Write>) -> Result<Box<dyn Write>, Exit> {
    if path == "-" {
        return Ok(print());
    }
    let f = std::fs::File::create(path).map_err(|e| {
        PROGRAM.err(
            EX_OSERR,
            format!("ERROR: cannot open \"{path}\" for writing"),
            e.raw_os_error().unwrap_or(libc::EIO),
        )
    })?;
    Ok(Box::new(std::io::BufWriter::with_capacity(1 << 16, f)))
}

/// The analysis of a run whose log is printed as text: a measurement
/// (no -R) with -g, -G, -F, -m or -a, or -R without an analysis but with
/// -M. As FreeBSD's pmcstat does, the plugins' files are opened as the
/// run starts (so a bad path ends it before it measures), the records go
/// to the text dump, not to the plugins, and at the end the plugins are
/// shut down on what they saw, which is nothing (the calltree of -F
/// writes its header and root, the others nothing), and the statistics
/// of -v follow; `-M` gets its map's header. The extensions' outputs
/// (-x, -X, -j, -y) are not made then.
pub struct PrintedLogAnalysis {
    args: AnalysisArgs,
    plugins: Vec<Box<dyn Plugin>>,
    analysis: Analysis,
}

impl PrintedLogAnalysis {
    /// The plugins of `a`, their files opened; none when the run asked
    /// for no analysis and no map.
    pub fn start(
        a: &AnalysisArgs,
        verbosity: u32,
        print: &dyn Fn() -> Box<dyn Write>,
    ) -> Result<Option<PrintedLogAnalysis>, Exit> {
        let args = AnalysisArgs {
            folded: None,
            flamegraph: None,
            pprof: None,
            summary: None,
            ..a.clone()
        };
        if args.plugin == PluginKind::None && args.mapfile.is_none() {
            return Ok(None);
        }
        Ok(Some(PrintedLogAnalysis {
            plugins: plugins(&args, print)?,
            analysis: Analysis::new(Options {
                fsroot: args.fsroot.clone(),
                kerneldir: args.kerneldir.clone(),
                verbosity,
                tid: args.tid,
                cpus: None,
                merge_pmcs: false,
            }),
            args,
        }))
    }

    /// `pmcstat_shutdown_logging` at the run's end.
    pub fn finish(mut self, print: &dyn Fn() -> Box<dyn Write>) -> Result<(), Exit> {
        let verbosity = self.analysis.opts.verbosity;
        shutdown(
            &mut self.analysis,
            &mut self.plugins,
            &self.args,
            verbosity,
            print,
        )
    }
}

/// The graph file (`pa_graphfile`), which the plugin that came last and
/// `-g`'s call graph may both write: one stream for both.
#[derive(Clone)]
struct SharedOutput(Rc<RefCell<Box<dyn Write>>>);

impl Write for SharedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

/// Whether `-g` adds its call graph ahead of the plugin that came last
/// (FreeBSD's `pa_pplugin`): unless that plugin is the call graph itself
/// (`-g` then `-G`), which FreeBSD's gives every sample twice.
fn has_primary(a: &AnalysisArgs) -> bool {
    a.gprof_asked && a.plugin != PluginKind::CallGraph
}

/// The plugins the options chose, their output files opened: `-g`'s call
/// graph first when it has one ([`has_primary`]), then the plugin that
/// came last, then the extensions' outputs.
pub fn plugins(
    a: &AnalysisArgs,
    print: &dyn Fn() -> Box<dyn Write>,
) -> Result<Vec<Box<dyn Plugin>>, Exit> {
    let mut v: Vec<Box<dyn Plugin>> = Vec::new();
    let cg = CgOptions {
        depth: a.depth.unwrap_or(crate::pmcpl_callgraph::DEFAULT_DEPTH),
        show_offset: a.show_offset,
        skip_top_resolution: a.skip_top_resolution,
    };
    let primary = has_primary(a);
    let writes_graph_file = matches!(
        a.plugin,
        PluginKind::CallGraph
            | PluginKind::CallTree
            | PluginKind::Annotate
            | PluginKind::AnnotateCg
    ) || (primary && a.callgraph_asked);
    let graph_file = match writes_graph_file {
        true => {
            let path = a.graphfile.as_deref().unwrap_or("-");
            Some(SharedOutput(Rc::new(RefCell::new(output(path, print)?))))
        }
        false => None,
    };
    let to_graph_file = || -> Box<dyn Write> {
        match &graph_file {
            Some(f) => Box::new(f.clone()),
            None => print(),
        }
    };
    let graph = Rc::new(RefCell::new(CallGraph::new(cg)));
    if primary {
        let out = a.callgraph_asked.then(to_graph_file);
        v.push(Box::new(PrimaryCallGraph::new(graph.clone(), out)));
    }
    match a.plugin {
        PluginKind::None => {}
        PluginKind::CallGraph => v.push(Box::new(CallGraphPlugin::new(cg, to_graph_file()))),
        PluginKind::Annotate => v.push(Box::new(AnnotatePlugin::new(to_graph_file()))),
        PluginKind::AnnotateCg => v.push(Box::new(AnnotateCgPlugin::new(to_graph_file()))),
        PluginKind::CallTree => {
            v.push(Box::new(CalltreePlugin::new(to_graph_file(), print())));
        }
        PluginKind::Gprof => {
            let dir = a.samplesdir.as_deref().unwrap_or(".");
            v.push(Box::new(GprofPlugin::new(
                dir,
                a.wide_gprof,
                graph,
                cg.depth,
            )));
        }
    }
    if let Some(path) = &a.summary {
        v.push(Box::new(SummaryPlugin::new(output(path, print)?)));
    }
    if let Some(path) = &a.pprof {
        v.push(Box::new(PprofPlugin::new(output(path, print)?)));
    }
    if let Some(path) = &a.flamegraph {
        v.push(Box::new(FlameGraphPlugin::new(output(path, print)?)));
    }
    if let Some(path) = &a.folded {
        v.push(Box::new(FoldedPlugin::new(output(path, print)?)));
    }
    Ok(v)
}

/// Reads the log on `fd` to its end through the plugins, then has them
/// write their output, the `-M` map and the statistics.
pub fn analyze(
    fd: i32,
    a: &AnalysisArgs,
    verbosity: u32,
    cpus: Option<Vec<u32>>,
    print: &dyn Fn() -> Box<dyn Write>,
) -> Result<(), Exit> {
    let mut plugins = plugins(a, print)?;
    let mut analysis = Analysis::new(Options {
        fsroot: a.fsroot.clone(),
        kerneldir: a.kerneldir.clone(),
        verbosity,
        tid: a.tid,
        cpus,
        merge_pmcs: false,
    });
    let mut parser = Parser::new(fd);
    let mut ev = PmclogEv::zeroed();
    let mut failure = None;
    loop {
        let state = parser.read(&mut ev);
        match state {
            PmclogState::Ok => {
                analysis.process_event(&ev, &mut plugins);
                for w in analysis.take_warnings() {
                    PROGRAM.warnx(w);
                }
            }
            PmclogState::Eof => break,
            // An interrupted read: go on.
            PmclogState::RequireData => continue,
            // What was read is still written out (a partial profile),
            // then the error is reported.
            PmclogState::Error => {
                failure = Some(errx(
                    EX_DATAERR,
                    format!(
                        "ERROR: event parsing failed state: {} type: {} (record {}, offset {:#x})",
                        ev.pl_state,
                        ev.pl_type,
                        ev.pl_count + 1,
                        ev.pl_offset
                    ),
                ));
                break;
            }
        }
    }
    shutdown(&mut analysis, &mut plugins, a, verbosity, print)?;
    failure.map_or(Ok(()), Err)
}

/// `pmcstat_shutdown_logging`: the map file's header, the plugins'
/// output, the statistics.
fn shutdown(
    analysis: &mut Analysis,
    plugins: &mut [Box<dyn Plugin>],
    a: &AnalysisArgs,
    verbosity: u32,
    print: &dyn Fn() -> Box<dyn Write>,
) -> Result<(), Exit> {
    let io_error = |e: std::io::Error| {
        PROGRAM.err(
            EX_OSERR,
            "ERROR: cannot write the analysis",
            e.raw_os_error().unwrap_or(libc::EIO),
        )
    };
    // `-g` with a verbosity of 2 or more prints the map without -M too.
    let mut mapfile: Option<Box<dyn Write>> = match a.mapfile.as_deref() {
        None if a.gprof_asked && verbosity >= 2 => Some(print()),
        None => None,
        Some("-") => Some(print()),
        Some(path) => std::fs::File::create(path)
            .ok()
            .map(|f| Box::new(f) as Box<dyn Write>),
    };
    if let Some(m) = mapfile.as_mut() {
        m.write_all(b"MAP:\n").map_err(io_error)?;
    }
    // The plugin that came last writes before `-g`'s call graph, as
    // FreeBSD's shuts `pa_plugin` down before `pa_pplugin`.
    let mut order: Vec<usize> = (0..plugins.len()).collect();
    if has_primary(a) && plugins.len() > 1 {
        order.swap(0, 1);
    }
    for i in order {
        let m = mapfile.as_mut().map(|m| &mut **m as &mut dyn Write);
        plugins[i].shutdown(analysis, m).map_err(io_error)?;
    }
    for w in analysis.take_warnings() {
        PROGRAM.warnx(w);
    }
    if let Some(mut m) = mapfile {
        m.flush().map_err(io_error)?;
    }
    if verbosity >= 1 && a.any() {
        let mut out = print();
        out.write_all(analysis.statistics().as_bytes())
            .and_then(|()| out.flush())
            .map_err(io_error)?;
    }
    Ok(())
}

//! pmcstat(8): counts and samples with hwpmc(4).
//!
//! Implemented: system and process PMCs in counting and sampling mode
//! (-s -p -S -P) with -c, -C, -d, -E, -n, -N, -U, -W, -t pid or regular
//! expression, -w, -l, -o, -O file or host:port, -q, -v, a command to
//! run; -R file or host:port printing the text dump; -L and -u listing
//! the CPU's PMU events; the analysis of a log (-R) with the call graph
//! (-G, with -A, -I, -i, -z, -f, -M, -r, -k) and folded stacks (-x, an
//! extension). Options, argument checks, messages, output formats and
//! exit codes are FreeBSD's. The other analysis plugins (-g -F -m -a -T
//! and their helpers) are not implemented yet and are refused with a
//! message saying so.

mod pmcpl_annotate;
mod pmcpl_annotate_cg;
mod pmcpl_callgraph;
mod pmcpl_calltree;
mod pmcpl_flamegraph;
mod pmcpl_folded;
mod pmcpl_gprof;
mod pmcpl_pprof;
mod pmcpl_summary;
mod pmcstat_analysis;
mod pmcstat_log;
mod pmcstat_top;

use std::ffi::OsString;
use std::io::Write;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pmc::pmc::Pmc;
use pmc::pmclog::{Parser, PmclogEv, PmclogState};
use uapi::pmc::{PMC_CPU_ANY, PmcCaps, PmcFlags, PmcId, PmcMode};

use pmctool::sysexits::{EX_DATAERR, EX_OSERR, EX_UNAVAILABLE, EX_USAGE};
use pmctool::{Exit, Getopt, Opt, Program, last_errno, strerror};

pub(crate) const PROGRAM: Program = Program("pmcstat");

/// getopt(3)'s option string: FreeBSD's, -k (the kernel's directory in
/// an analysis), and the extensions -Q (hwpmc(4) NOTIFICATIONS), -x
/// (folded stacks), -X (flame graphs), -j (pprof profiles) and -y
/// (functions and source lines).
const OPTIONS: &str = "ACD:EF:G:ILM:NO:P:Q:R:S:TUWX:Za:c:def:gi:j:k:l:m:n:o:p:qr:s:t:u:vw:x:y:z:";

const DEFAULT_SAMPLE_COUNT: u64 = 65536;
const DEFAULT_WAIT_INTERVAL: f64 = 5.0;
/// Lines between headers when the output is not a terminal.
const DEFAULT_DISPLAY_HEIGHT: usize = 256;

pub(crate) fn errx(code: u8, msg: impl AsRef<str>) -> Exit {
    PROGRAM.errx(code, msg)
}

/// err(3): the message and the description of `errno`.
fn err(code: u8, msg: impl AsRef<str>, errno: i32) -> Exit {
    PROGRAM.err(code, msg, errno)
}

const USAGE: &str = "[options] [commandline]\n\
\t Measure process and/or system performance using hardware\n\
\t performance monitoring counters.\n\
\t Options include:\n\
\t -C\t\t (toggle) show cumulative counts\n\
\t -D path\t create profiles in directory \"path\"\n\
\t -E\t\t (toggle) show counts at process exit\n\
\t -F file\t write a system-wide callgraph (Kcachegrind format) to \"file\"\n\
\t -G file\t write a system-wide callgraph to \"file\"\n\
\t -I\t\t don't resolve leaf function name, show address instead\n\
\t -L\t\t list all counters available on this host\n\
\t -M file\t print executable/gmon file map to \"file\"\n\
\t -N\t\t (toggle) capture callchains\n\
\t -O file\t send log output to \"file\"\n\
\t -P spec\t allocate a process-private sampling PMC\n\
\t -Q count\t print a line every \"count\" samples of each sampling PMC\n\
\t -R file\t read events from \"file\"\n\
\t -S spec\t allocate a system-wide sampling PMC\n\
\t -T\t\t start in top mode\n\
\t -U \t\t merged user kernel stack capture\n\
\t -W\t\t (toggle) show counts per context switch\n\
\t -X file\t write a flame graph (SVG) to \"file\"\n\
\t -a file\t print sampled PCs and callgraph to \"file\"\n\
\t -c cpu-list\t set cpus for subsequent system-wide PMCs\n\
\t -d\t\t (toggle) track descendants\n\
\t -e\t\t use wide history counter for gprof(1) output\n\
\t -f spec\t pass \"spec\" to as plugin option\n\
\t -g\t\t produce gprof(1) compatible profiles\n\
\t -i lwp\t\t filter on thread id \"lwp\" in post-processing\n\
\t -j file\t write a pprof profile to \"file\"\n\
\t -k dir\t look for the kernel and its modules in \"dir\"\n\
\t -l secs\t set duration time\n\
\t -m file\t print sampled PCs to \"file\"\n\
\t -n rate\t set sampling rate\n\
\t -o file\t send print output to \"file\"\n\
\t -p spec\t allocate a process-private counting PMC\n\
\t -q\t\t suppress verbosity\n\
\t -r fsroot\t specify FS root directory\n\
\t -s spec\t allocate a system-wide counting PMC\n\
\t -t process-spec attach to running processes matching \"process-spec\"\n\
\t -u spec \t provide short description of counters matching spec\n\
\t -v\t\t increase verbosity\n\
\t -w secs\t set printing time interval\n\
\t -x file\t write folded call stacks to \"file\"\n\
\t -y file\t write sampled functions and source lines to \"file\"\n\
\t -z depth\t limit callchain display depth";

// What options need to be meaningful (FreeBSD's REQUIRED bits).
const REQ_COUNTING: u32 = 1 << 0;
const REQ_SAMPLING: u32 = 1 << 1;
const REQ_PROCESS: u32 = 1 << 2;
const REQ_SYSTEM: u32 = 1 << 3;
const REQ_COMMANDLINE_OR_TARGET: u32 = 1 << 4;
const REQ_OUTPUT_LOGFILE: u32 = 1 << 5;

/// One PMC to allocate (a system spec has one per CPU).
#[derive(Debug, Clone)]
struct Event {
    name: String,
    spec: String,
    mode: PmcMode,
    flags: u32,
    count: u64,
    cpu: u32,
    cumulative: bool,
    id: PmcId,
    saved: u64,
    fieldwidth: usize,
    fieldskip: usize,
}

/// Where printed output goes.
enum PrintFile {
    Stderr,
    Stdout,
    File(std::fs::File),
}

impl Write for PrintFile {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            PrintFile::Stderr => std::io::stderr().write(b),
            PrintFile::Stdout => std::io::stdout().write(b),
            PrintFile::File(f) => f.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            PrintFile::Stderr => std::io::stderr().flush(),
            PrintFile::Stdout => std::io::stdout().flush(),
            PrintFile::File(f) => f.flush(),
        }
    }
}

impl PrintFile {
    fn fd(&self) -> RawFd {
        match self {
            PrintFile::Stderr => 2,
            PrintFile::Stdout => 1,
            PrintFile::File(f) => f.as_raw_fd(),
        }
    }
    fn write_str(&mut self, s: &str) {
        self.write_bytes(s.as_bytes());
    }
    fn write_bytes(&mut self, b: &[u8]) {
        let _ = match self {
            PrintFile::Stderr => std::io::stderr().write_all(b),
            PrintFile::Stdout => std::io::stdout().write_all(b),
            PrintFile::File(f) => f.write_all(b),
        };
    }
    /// Another handle on the same output, for the log reader thread.
    fn try_clone(&self) -> Result<PrintFile, Exit> {
        Ok(match self {
            PrintFile::Stderr => PrintFile::Stderr,
            PrintFile::Stdout => PrintFile::Stdout,
            PrintFile::File(f) => PrintFile::File(f.try_clone().map_err(|e| {
                err(
                    EX_OSERR,
                    "ERROR: cannot share the output file",
                    e.raw_os_error().unwrap_or(libc::EIO),
                )
            })?),
        })
    }
    fn flush(&mut self) {
        let _ = Write::flush(self);
    }
    /// Another handle on the same output for the analysis's writers; the
    /// standard error should the output's descriptor fail to duplicate.
    fn boxed(&self) -> Box<dyn Write> {
        match self.try_clone() {
            Ok(p) => Box::new(p),
            Err(_) => Box::new(std::io::stderr()),
        }
    }
}

#[derive(Default)]
struct Args {
    events: Vec<Event>,
    required: u32,
    has_process: bool,
    has_system: bool,
    has_counting: bool,
    has_sampling: bool,
    has_cpumask: bool,
    cpumask: Option<Vec<u32>>,
    callchain: bool,
    usercallchain: bool,
    descendants: bool,
    log_procexit: bool,
    log_proccsw: bool,
    cumulative: bool,
    sample_count: Option<u64>,
    duration: Option<f64>,
    interval: f64,
    output_log: Option<String>,
    read_log: Option<String>,
    printfile: Option<PrintFile>,
    do_print: bool,
    targets: Vec<i32>,
    /// `-t` regular expressions, matched against command names once the
    /// library is up.
    target_patterns: Vec<pmc::regcomp::Regex>,
    has_target: bool,
    list_counters: bool,
    describe: Option<String>,
    command: Vec<String>,
    verbosity: u32,
    /// `-Q`: a notification every so many samples of each sampling PMC.
    notify_every: Option<u32>,
    /// The analysis options (-A -f -G -I -i -k -M -r -x -z).
    analysis: pmcstat_analysis::AnalysisArgs,
    /// `-T`: the top view.
    top: bool,
}

/// The library, initialised by the first PMC specification.
fn library() -> Result<&'static Pmc, Exit> {
    if pmc::pmc_init() < 0 {
        return Err(err(
            EX_UNAVAILABLE,
            "ERROR: Initialization of the pmc(3) library failed",
            last_errno(),
        ));
    }
    pmc::library_handle().map_err(|e| {
        err(
            EX_UNAVAILABLE,
            "ERROR: Initialization of the pmc(3) library failed",
            e,
        )
    })
}

/// CPUs of the machine that answer (the root CPU set).
fn all_cpus(pmc: &Pmc) -> Vec<u32> {
    (0..pmc.cpuinfo().pm_ncpu)
        .filter(|&c| pmc.pmcinfo(c as i32).is_ok())
        .collect()
}

/// strtol(3) with base 0, libc's own: the value and the rest of `s`
/// after the number, or None when it reads no number (`end == s`).
fn strtol(s: &str) -> Option<(i64, &str)> {
    let (value, used) = pmctool::strtol(s.as_bytes())?;
    // strtol reads only ASCII, so `used` ends on a character boundary.
    (used > 0).then_some((value, &s[used..]))
}

fn parse_cpus(arg: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    let mut rest = arg;
    while !rest.is_empty() {
        let (v, r) = strtol(rest)?;
        if v < 0 {
            return None;
        }
        cpus.push(u32::try_from(v).ok()?);
        rest = r.trim_start_matches([',', ' ', '\t']);
    }
    // A CPU set, as FreeBSD keeps it: ascending, each CPU once.
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() { None } else { Some(cpus) }
}

/// strtod(3), libc's own, of a whole argument: None when any of it is
/// left unread.
fn strtod(arg: &str) -> Option<f64> {
    let text = std::ffi::CString::new(arg).ok()?;
    let mut end: *mut libc::c_char = std::ptr::null_mut();
    // SAFETY: `text` is a NUL-terminated string that outlives the call;
    // strtod stores in `end` a pointer into it.
    let value = unsafe { libc::strtod(text.as_ptr(), &mut end) };
    // SAFETY: `end` points into `text`, at its NUL at the latest.
    (unsafe { *end } == 0).then_some(value)
}

/// atoi(3): the decimal number at the start of `arg`, 0 when there is
/// none.
fn atoi(arg: &str) -> i64 {
    let t = arg.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let v = t[..end].parse::<i64>().unwrap_or(0);
    if neg { -v } else { v }
}

/// atof(3): the number at the start of `arg`, 0 when there is none.
fn atof(arg: &str) -> f64 {
    let arg = arg.trim_start();
    (1..=arg.len())
        .rev()
        .filter(|&n| arg.is_char_boundary(n))
        .find_map(|n| arg[..n].parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// A duration or interval as FreeBSD's pmcstat reads it, with strtod(3)
/// over the whole argument; an infinite or not-a-number value, which
/// FreeBSD's takes, is refused too.
fn parse_seconds(arg: &str, what: &str) -> Result<f64, Exit> {
    match strtod(arg) {
        Some(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(errx(EX_USAGE, format!("ERROR: Illegal {what} \"{arg}\"."))),
    }
}

fn add_spec(a: &mut Args, opt: char, spec: &str) -> Result<(), Exit> {
    let mode = match opt {
        'p' => PmcMode::Tc,
        's' => PmcMode::Sc,
        'P' => PmcMode::Ts,
        _ => PmcMode::Ss,
    };
    if mode.is_virtual() {
        a.has_process = true;
        a.required |= REQ_COMMANDLINE_OR_TARGET;
    } else {
        a.has_system = true;
    }
    if mode.is_sampling() {
        a.has_sampling = true;
        a.required |= REQ_OUTPUT_LOGFILE;
    } else {
        a.has_counting = true;
    }
    let pmc = library()?;
    if pmc.cpuinfo().pm_npmc == 0 {
        return Err(err(
            EX_OSERR,
            "ERROR: Cannot determine the number of PMCs on CPU 0",
            libc::ENXIO,
        ));
    }
    let mask = a.cpumask.get_or_insert_with(|| all_cpus(pmc)).clone();
    let mut flags = 0;
    if a.callchain {
        flags |= PmcFlags::CALLCHAIN.bits();
        if a.usercallchain {
            flags |= PmcFlags::USERCALLCHAIN.bits();
        }
    }
    if a.descendants {
        flags |= PmcFlags::DESCENDANTS.bits();
    }
    if a.log_procexit {
        flags |= PmcFlags::LOG_PROCEXIT.bits();
    }
    if a.log_proccsw {
        flags |= PmcFlags::LOG_PROCCSW.bits();
    }
    // Without -n, the event's own period from the PMU tables.
    let count = if mode.is_sampling() {
        a.sample_count.unwrap_or_else(|| {
            // Only for an event the driver will count from the table.
            let mut probe = <uapi::pmc::PmcOpPmcallocate as uapi::Plain>::zeroed();
            match pmc.pmu() {
                Some(t)
                    if t.allocate(spec, &mut probe).is_ok() && pmc.has_class(probe.pm_class) =>
                {
                    t.sample_rate(spec)
                }
                _ => DEFAULT_SAMPLE_COUNT,
            }
        })
    } else {
        0
    };
    let name = spec
        .split([',', ' ', '\t'])
        .next()
        .unwrap_or(spec)
        .to_owned();
    let first_cpu = mask.first().copied().unwrap_or(0);
    let ev = Event {
        name,
        spec: spec.to_owned(),
        mode,
        flags,
        count,
        cpu: if mode.is_system() {
            first_cpu
        } else {
            PMC_CPU_ANY
        },
        cumulative: a.cumulative,
        id: 0,
        saved: 0,
        fieldwidth: 0,
        fieldskip: 0,
    };
    let mut caps = 0;
    if a.has_system {
        // Whether the counter is system-wide decides the per-CPU copies.
        let id = pmc
            .allocate(spec, mode.raw(), flags, ev.cpu as i32, count)
            .map_err(|e| {
                err(
                    EX_OSERR,
                    format!("ERROR: Cannot allocate system-mode pmc with specification \"{spec}\""),
                    e,
                )
            })?;
        caps = pmc
            .capabilities(id)
            .map_err(|e| err(EX_OSERR, "ERROR: Cannot get pmc capabilities", e))?;
        let _ = pmc.release(id);
    }
    a.events.push(ev.clone());
    if caps & PmcCaps::SYSWIDE.bits() != 0 || !mode.is_system() {
        return Ok(());
    }
    for &cpu in mask.iter().skip(1) {
        a.events.push(Event { cpu, ..ev.clone() });
    }
    Ok(())
}

/// The share in percent under which the top views leave nodes out,
/// unless `-f threshold=` says otherwise.
const DEFAULT_THRESHOLD: f64 = 0.5;

fn parse(argv: &[OsString]) -> Result<Args, Exit> {
    let mut a = Args {
        callchain: true,
        interval: DEFAULT_WAIT_INTERVAL,
        verbosity: 1,
        analysis: pmcstat_analysis::AnalysisArgs {
            // pmcstat_log.c's pmcstat_threshold.
            threshold: DEFAULT_THRESHOLD,
            ..Default::default()
        },
        ..Args::default()
    };
    let mut opts = Getopt::new(PROGRAM, argv, OPTIONS);
    while let Some(found) = opts.next_opt() {
        // getopt(3) has said what is wrong.
        let Opt::Opt(c, value) = found else {
            return Err(errx(EX_USAGE, USAGE));
        };
        let opt = char::from(c);
        let v = match value {
            Some(v) => v.to_str().ok_or_else(|| {
                errx(
                    EX_USAGE,
                    format!(
                        "ERROR: the argument \"{}\" of option -{opt} is not valid UTF-8.",
                        pmctool::quoted(v)
                    ),
                )
            })?,
            None => "",
        };
        match opt {
            'C' => {
                a.cumulative = !a.cumulative;
                a.required |= REQ_COUNTING;
            }
            'c' => {
                a.has_cpumask = true;
                a.required |= REQ_SYSTEM;
                if v == "*" {
                    a.cpumask = None;
                } else {
                    a.cpumask = Some(parse_cpus(v).ok_or_else(|| {
                        errx(
                            EX_USAGE,
                            format!("ERROR: Illegal CPU specification \"{v}\"."),
                        )
                    })?);
                }
            }
            'd' => {
                a.descendants = !a.descendants;
                a.required |= REQ_PROCESS;
            }
            'E' => {
                a.log_procexit = !a.log_procexit;
                a.required |= REQ_PROCESS | REQ_COUNTING | REQ_OUTPUT_LOGFILE;
            }
            'W' => {
                a.log_proccsw = !a.log_proccsw;
                a.required |= REQ_PROCESS | REQ_COUNTING | REQ_OUTPUT_LOGFILE;
            }
            'l' => a.duration = Some(parse_seconds(v, "duration time value")?),
            'n' => {
                // strtol(3) into a uint64_t, as FreeBSD's: a negative
                // count wraps around, only 0 is refused.
                let n = match strtol(v) {
                    Some((n, "")) if n != 0 => n as u64,
                    _ => {
                        return Err(errx(
                            EX_USAGE,
                            format!("ERROR: Illegal count value \"{v}\"."),
                        ));
                    }
                };
                a.sample_count = Some(n);
                a.required |= REQ_SAMPLING;
            }
            'N' => {
                a.callchain = !a.callchain;
                a.required |= REQ_SAMPLING;
            }
            'U' => {
                a.usercallchain = !a.usercallchain;
                a.required |= REQ_SAMPLING;
            }
            'o' => {
                let f = std::fs::File::create(v).map_err(|_| {
                    errx(EX_OSERR, format!("ERROR: cannot open \"{v}\" for writing."))
                })?;
                a.printfile = Some(PrintFile::File(f));
                a.do_print = true;
            }
            'O' => {
                if a.output_log.is_some() {
                    return Err(errx(
                        EX_USAGE,
                        "ERROR: option -O may only be specified once.",
                    ));
                }
                a.output_log = Some(v.to_owned());
            }
            'p' | 's' | 'P' | 'S' => add_spec(&mut a, opt, v)?,
            'Q' => {
                let n = match strtol(v) {
                    Some((n, "")) if n > 0 && n <= i64::from(u32::MAX) => n as u32,
                    _ => {
                        return Err(errx(
                            EX_USAGE,
                            format!("ERROR: Illegal notification count \"{v}\"."),
                        ));
                    }
                };
                a.notify_every = Some(n);
                a.required |= REQ_SAMPLING;
            }
            'q' => a.verbosity = 0,
            'v' => a.verbosity += 1,
            'R' => {
                if a.read_log.is_some() {
                    return Err(errx(
                        EX_USAGE,
                        "ERROR: option -R may only be specified once.",
                    ));
                }
                if a.printfile.is_none() {
                    a.printfile = Some(PrintFile::Stdout);
                }
                a.read_log = Some(v.to_owned());
            }
            't' => {
                a.has_target = true;
                a.required |= REQ_PROCESS;
                match strtol(v) {
                    Some((pid, rest)) if pid >= 0 && rest.len() < v.len() => {
                        a.targets.insert(0, pid as i32)
                    }
                    _ => {
                        let re = pmc::regcomp::Regex::new(v).map_err(|e| {
                            // err(3), as FreeBSD's: the errno regcomp(3)
                            // left, which it does not set (0 here).
                            err(
                                EX_DATAERR,
                                format!("ERROR: Failed to compile regex \"{v}\": {e}"),
                                0,
                            )
                        })?;
                        a.target_patterns.push(re);
                    }
                }
            }
            'w' => a.interval = parse_seconds(v, "wait interval value")?,
            'k' => a.analysis.kerneldir = Some(v.to_owned()),
            'A' => a.analysis.skip_top_resolution = true,
            'I' => a.analysis.show_offset = true,
            'G' => {
                a.analysis.plugin = pmcstat_analysis::PluginKind::CallGraph;
                a.analysis.callgraph_asked = true;
                a.analysis.graphfile = Some(v.to_owned());
            }
            'i' => {
                // strtol(optarg, &end, 0), its end unchecked.
                let tid = strtol(v).map_or(0, |(n, _)| n);
                a.analysis.tid = Some(tid as u32);
            }
            'M' => a.analysis.mapfile = Some(v.to_owned()),
            'r' => a.analysis.fsroot = v.to_owned(),
            'x' => a.analysis.folded = Some(v.to_owned()),
            'X' => a.analysis.flamegraph = Some(v.to_owned()),
            'j' => a.analysis.pprof = Some(v.to_owned()),
            'y' => a.analysis.summary = Some(v.to_owned()),
            'z' => {
                // Stored in an int, as FreeBSD's: the fraction goes
                // before the check.
                let depth = match strtod(v).map(|d| d as i32) {
                    Some(d) if d > 0 => d as usize,
                    _ => {
                        return Err(errx(
                            EX_USAGE,
                            format!("ERROR: Illegal callchain depth \"{v}\"."),
                        ));
                    }
                };
                a.analysis.depth = Some(depth);
            }
            'f' => {
                if a.analysis.plugin == pmcstat_analysis::PluginKind::None {
                    return Err(err(EX_USAGE, "ERROR: Need -g/-G/-m/-T.", 0));
                }
                if let Some(t) = v.strip_prefix("threshold=") {
                    a.analysis.threshold = atof(t);
                } else if a.analysis.plugin == pmcstat_analysis::PluginKind::CallTree {
                    // The calltree's one option (pmcpl_ct_configure).
                    let Some(n) = v.strip_prefix("skiplink=") else {
                        return Err(err(EX_USAGE, format!("ERROR: unknown option <{v}>."), 0));
                    };
                    a.analysis.skiplink = atoi(n) != 0;
                }
                // The other plugins have no configuration to refuse it:
                // FreeBSD's ignores the option.
            }
            'L' => a.list_counters = true,
            'u' => a.describe = Some(v.to_owned()),
            // In FreeBSD's option string without a meaning: usage.
            'Z' => return Err(errx(EX_USAGE, USAGE)),
            'g' => {
                a.analysis.plugin = pmcstat_analysis::PluginKind::Gprof;
                a.analysis.gprof_asked = true;
            }
            'e' => a.analysis.wide_gprof = true,
            'D' => {
                let meta = std::fs::metadata(v).map_err(|e| {
                    err(
                        EX_OSERR,
                        format!("ERROR: Cannot stat \"{v}\""),
                        e.raw_os_error().unwrap_or(libc::EIO),
                    )
                })?;
                if !meta.is_dir() {
                    return Err(errx(
                        EX_USAGE,
                        format!("ERROR: \"{v}\" is not a directory."),
                    ));
                }
                a.analysis.samplesdir = Some(v.to_owned());
            }
            'F' => {
                a.analysis.plugin = pmcstat_analysis::PluginKind::CallTree;
                a.analysis.callgraph_asked = true;
                a.analysis.graphfile = Some(v.to_owned());
            }
            'm' => {
                a.analysis.plugin = pmcstat_analysis::PluginKind::Annotate;
                a.analysis.annotate_asked = true;
                a.analysis.graphfile = Some(v.to_owned());
            }
            'a' => {
                a.analysis.plugin = pmcstat_analysis::PluginKind::AnnotateCg;
                a.analysis.annotate_asked = true;
                a.analysis.graphfile = Some(v.to_owned());
            }
            'T' => {
                a.analysis.plugin = pmcstat_analysis::PluginKind::CallGraph;
                a.top = true;
                if a.printfile.is_none() {
                    a.printfile = Some(PrintFile::Stdout);
                }
            }
            // The option string has no other option.
            _ => return Err(errx(EX_USAGE, USAGE)),
        }
    }
    a.command = opts
        .operands()
        .iter()
        .map(|w| {
            w.to_str().map(str::to_owned).ok_or_else(|| {
                errx(
                    EX_USAGE,
                    format!(
                        "ERROR: the command line argument \"{}\" is not valid UTF-8.",
                        pmctool::quoted(w)
                    ),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    if a.list_counters || a.describe.is_some() {
        return Ok(a);
    }
    check(&a)?;
    Ok(a)
}

/// FreeBSD's consistency checks, in its order.
fn check(a: &Args) -> Result<(), Exit> {
    let usage = |m: &str| Err(errx(EX_USAGE, m));
    let has_command = !a.command.is_empty();
    if a.output_log.is_some() && a.read_log.is_some() {
        return usage("ERROR: options -O and -R are mutually exclusive.");
    }
    if a.duration.is_some() && a.top {
        return usage("ERROR: options -T and -l are mutually exclusive.");
    }
    {
        use pmcstat_analysis::PluginKind;
        if a.analysis.annotate_asked && a.read_log.is_none() {
            let opt = if a.analysis.plugin == PluginKind::Annotate {
                "-m"
            } else {
                "-a"
            };
            return usage(&format!("ERROR: option {opt} requires an input file"));
        }
        if a.analysis.annotate_asked && (a.analysis.gprof_asked || a.analysis.callgraph_asked) {
            return usage("ERROR: option -m and -g | -G are mutually exclusive");
        }
    }
    if a.read_log.is_some() {
        if has_command {
            return usage("ERROR: option -R may not be used with a command line specification.");
        }
        if a.has_target {
            return usage("ERROR: option -R may not be used with option -t.");
        }
        if !a.events.is_empty() {
            return usage("ERROR: option -R may not be used with a PMC event specification.");
        }
    } else if a.events.is_empty() {
        return Err(errx(EX_USAGE, USAGE));
    }
    if a.has_target && a.required & REQ_PROCESS != 0 && !a.has_process {
        return usage("ERROR: option -t requires a process mode PMC to be specified.");
    }
    if a.required & REQ_PROCESS != 0 && !has_command && !a.has_target {
        return usage(
            "ERROR: options -d, -E, -p, -P, and -W require a command line or target process.",
        );
    }
    if a.required & REQ_COMMANDLINE_OR_TARGET != 0 && !has_command && !a.has_target {
        return usage("ERROR: options -P and -p require a target process or a command line.");
    }
    if a.required & REQ_PROCESS != 0 && !a.has_process {
        return usage(
            "ERROR: options -d, -E, -t, and -W require a process mode PMC to be specified.",
        );
    }
    if a.has_cpumask && !a.has_system && a.read_log.is_none() {
        return usage("ERROR: option -c requires at least one system mode PMC to be specified.");
    }
    if a.required & REQ_COUNTING != 0 && !a.has_counting {
        return usage(
            "ERROR: options -C, -W and -o require at least one counting mode PMC to be specified.",
        );
    }
    if a.required & REQ_SAMPLING != 0 && !a.has_sampling {
        return usage(
            "ERROR: options -N, -n and -O require at least one sampling mode PMC to be specified.",
        );
    }
    if a.analysis.any() && !a.has_sampling && a.read_log.is_none() {
        return usage("ERROR: options -g/-G/-m/-T require sampling PMCs or -R to be specified.");
    }
    if a.analysis.wide_gprof && !a.analysis.gprof_asked {
        return usage("ERROR: option -e requires gprof mode to be specified.");
    }
    if a.output_log.is_some() && a.required & REQ_OUTPUT_LOGFILE == 0 {
        return usage("ERROR: option -O is used only with options -E, -P, -S and -W.");
    }
    let gprof = a.analysis.gprof_asked;
    if a.analysis.samplesdir.is_some() && !gprof {
        return usage("ERROR: option -D is only used with -g.");
    }
    if a.analysis.mapfile.is_some() && !gprof && a.read_log.is_none() {
        return usage("ERROR: option -M is only used with -g/-R.");
    }
    if a.has_counting && a.has_sampling && a.output_log.is_none() {
        return usage(
            "ERROR: option -O is required if counting and sampling PMCs are specified together.",
        );
    }
    Ok(())
}

/// Opens a log path as FreeBSD does: "-", host:port, or a file.
fn open_log(path: &str, write: bool) -> Result<RawFd, Exit> {
    let what = if write { "writing" } else { "reading" };
    let fail = |e: String| {
        errx(
            EX_OSERR,
            format!("ERROR: Cannot open \"{path}\" for {what}: {e}."),
        )
    };
    if path == "-" {
        return Ok(if write { 1 } else { 0 });
    }
    let network = !path.starts_with('/') && !path.starts_with('.') && path.contains(':');
    if network {
        let (host, port) = path.rsplit_once(':').expect("contains ':'");
        if host.is_empty() {
            return Err(fail(strerror(libc::EINVAL)));
        }
        let addrs: Vec<_> = (
            host,
            port.parse::<u16>()
                .map_err(|_| fail(strerror(libc::EINVAL)))?,
        )
            .to_socket_addrs()
            .map_err(|e| fail(e.to_string()))?
            .collect();
        if write {
            let s = TcpStream::connect(&addrs[..])
                .map_err(|e| fail(strerror(e.raw_os_error().unwrap_or(libc::EIO))))?;
            return Ok(s.into_raw_fd());
        }
        let l = TcpListener::bind(&addrs[..])
            .map_err(|e| fail(strerror(e.raw_os_error().unwrap_or(libc::EIO))))?;
        let (s, _) = l
            .accept()
            .map_err(|e| fail(strerror(e.raw_os_error().unwrap_or(libc::EIO))))?;
        return Ok(s.into_raw_fd());
    }
    let file = if write {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(path)
    } else {
        std::fs::File::open(path)
    };
    file.map(IntoRawFd::into_raw_fd)
        .map_err(|e| fail(strerror(e.raw_os_error().unwrap_or(libc::EIO))))
}

/// Text is written out in pieces of about this size, and before the
/// parser waits for more of the log.
const PRINT_CHUNK: usize = 64 * 1024;

/// Writes out what was printed so far (and the warnings, to stderr).
fn print_out(text: &mut Vec<u8>, warn: &mut Vec<u8>, out: &mut PrintFile) {
    out.write_bytes(text);
    let _ = std::io::stderr().write_all(warn);
    text.clear();
    warn.clear();
}

/// Prints every event the parser has; Finished at the log's end. Output
/// streams: it goes out in pieces as the log is read, and everything read
/// so far is out before the parser waits on the log, so a live log shows
/// its events as they come and `pmcstat -R log | head` ends at once.
fn dump(parser: &mut Parser, ev: &mut PmclogEv, out: &mut PrintFile) -> Result<bool, Exit> {
    let mut text = Vec::with_capacity(PRINT_CHUNK + 4096);
    let mut warn = Vec::new();
    let finished = loop {
        let state = match parser.read_buffered(ev) {
            PmclogState::RequireData => {
                print_out(&mut text, &mut warn, out);
                parser.read(ev)
            }
            s => s,
        };
        match state {
            PmclogState::Ok => {
                pmcstat_log::print_event(&mut text, &mut warn, ev);
                if text.len() >= PRINT_CHUNK {
                    print_out(&mut text, &mut warn, out);
                }
            }
            // The log's end, its CLOSELOG record included, prints
            // nothing, as in FreeBSD, whose reader returns EOF for it.
            PmclogState::Eof => break true,
            PmclogState::RequireData => break false,
            PmclogState::Error => {
                print_out(&mut text, &mut warn, out);
                return Err(errx(
                    EX_DATAERR,
                    format!(
                        "ERROR: event parsing failed (record {}, offset {:#x}).",
                        ev.pl_count + 1,
                        ev.pl_offset
                    ),
                ));
            }
        }
    };
    print_out(&mut text, &mut warn, out);
    Ok(finished)
}

fn read_log(a: &mut Args) -> Result<(), Exit> {
    let path = a.read_log.clone().expect("-R");
    let fd = open_log(&path, false)?;
    if a.top {
        let out = a.printfile.take().unwrap_or(PrintFile::Stdout);
        let mut top = new_top(a, out);
        let interval = Duration::from_secs_f64(a.interval);
        pmcstat_top::run(&mut top, fd, interval, true)
            .and_then(|_| top.print_statistics())
            .map_err(|e| {
                err(
                    EX_OSERR,
                    "ERROR: cannot display",
                    e.raw_os_error().unwrap_or(0),
                )
            })?;
        // SAFETY: the log's descriptor, opened above and not used after.
        unsafe { libc::close(fd) };
        return Ok(());
    }
    if a.analysis.any() {
        let out = a.printfile.take().unwrap_or(PrintFile::Stdout);
        let print = || out.boxed();
        let result =
            pmcstat_analysis::analyze(fd, &a.analysis, a.verbosity, a.cpumask.clone(), &print);
        // SAFETY: the descriptor is the log's, opened above and not used
        // after this.
        unsafe { libc::close(fd) };
        return result;
    }
    let mut parser = Parser::new(fd);
    let mut ev = PmclogEv::zeroed();
    let out = a.printfile.get_or_insert(PrintFile::Stdout);
    let map_out = out.try_clone()?;
    let print_map = move || map_out.boxed();
    // -M's map, which has only its header here.
    let map = pmcstat_analysis::PrintedLogAnalysis::start(&a.analysis, a.verbosity, &print_map)?;
    // The descriptor blocks; the dump stops early only when a read was
    // interrupted, and then goes on.
    while !dump(&mut parser, &mut ev, out)? {}
    out.flush();
    map.map_or(Ok(()), |m| m.finish(&print_map))
}

/// What the top view of `-T` is made from (sent to the thread that
/// draws it in a live run).
struct TopArgs {
    opts: libpmcstat::libpmcstat_logging::Options,
    cg: pmcpl_callgraph::CgOptions,
    threshold: f64,
    /// The view to start with: the plugin the options chose last.
    view: pmcstat_top::View,
    skiplink: bool,
}

impl TopArgs {
    fn of(a: &Args) -> TopArgs {
        TopArgs {
            opts: libpmcstat::libpmcstat_logging::Options {
                fsroot: a.analysis.fsroot.clone(),
                kerneldir: a.analysis.kerneldir.clone(),
                verbosity: a.verbosity,
                tid: a.analysis.tid,
                cpus: a.cpumask.clone(),
                merge_pmcs: true,
            },
            cg: pmcpl_callgraph::CgOptions {
                depth: a.analysis.depth.unwrap_or(pmcpl_callgraph::DEFAULT_DEPTH),
                show_offset: a.analysis.show_offset,
                skip_top_resolution: a.analysis.skip_top_resolution,
            },
            threshold: a.analysis.threshold,
            view: if a.analysis.plugin == pmcstat_analysis::PluginKind::CallTree {
                pmcstat_top::View::CallTree
            } else {
                pmcstat_top::View::CallGraph
            },
            skiplink: a.analysis.skiplink,
        }
    }

    /// The view, drawn into `out`.
    fn top(self, out: PrintFile) -> pmcstat_top::Top {
        let tty = pmcstat_top::terminal_size(out.fd());
        let mut top = pmcstat_top::Top::new(self.opts, self.cg, self.threshold, Box::new(out), tty);
        top.set_view(self.view);
        top.set_skiplink(self.skiplink);
        top
    }
}

/// The top view of `-T`, drawn into `out`.
fn new_top(a: &Args, out: PrintFile) -> pmcstat_top::Top {
    TopArgs::of(a).top(out)
}

fn display_height(out: &PrintFile) -> usize {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(out.fd()) } == 1 {
        let mut ws: libc::winsize = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes a struct winsize through the pointer.
        if unsafe { libc::ioctl(out.fd(), libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_row > 1 {
            return usize::from(ws.ws_row) - 1;
        }
    }
    DEFAULT_DISPLAY_HEIGHT
}

/// Bits per decimal digit, as FreeBSD's pmcstat writes it (log2(10) to
/// six places); kept so column widths match.
#[allow(clippy::approx_constant)]
const DIGITS_PER_BIT_DIVISOR: f64 = 3.32193;

fn set_widths(pmc: &Pmc, events: &mut [Event]) {
    for e in events.iter_mut() {
        let cw = pmc.width(e.id).unwrap_or(64) as f64;
        let mut header_width = e.name.len() + 2;
        let display_width = (cw / DIGITS_PER_BIT_DIVISOR).floor() as usize + 1;
        if e.mode.is_system() {
            header_width += 3;
        }
        if header_width > display_width {
            e.fieldskip = 0;
            e.fieldwidth = header_width;
        } else {
            e.fieldskip = display_width - header_width;
            e.fieldwidth = display_width;
        }
    }
}

fn header(events: &[Event]) -> String {
    let mut h = String::from("# ");
    for e in events.iter().filter(|e| !e.mode.is_sampling()) {
        h.push_str(&" ".repeat(e.fieldskip));
        let w = e.fieldwidth - e.fieldskip - 2;
        if e.mode.is_system() {
            h.push_str(&format!(
                "s/{:02}/{:<w$} ",
                e.cpu,
                e.name,
                w = w.saturating_sub(3)
            ));
        } else {
            h.push_str(&format!("p/{:>w$} ", e.name, w = w));
        }
    }
    h
}

fn values(pmc: &Pmc, events: &mut [Event]) -> Result<String, Exit> {
    let mut line = String::new();
    let mut first = true;
    for e in events.iter_mut().filter(|e| !e.mode.is_sampling()) {
        let v = pmc.read(e.id).map_err(|er| {
            err(
                EX_OSERR,
                format!("ERROR: Cannot read pmc \"{}\"", e.name),
                er,
            )
        })?;
        let shown = if e.cumulative {
            v
        } else {
            let d = v.wrapping_sub(e.saved);
            e.saved = v;
            d
        };
        let w = if first {
            e.fieldwidth + 2
        } else {
            e.fieldwidth
        };
        first = false;
        line.push_str(&format!("{shown:>w$} "));
    }
    Ok(line)
}

/// One line of counting output, after the header when one is due.
fn print_line(
    out: &mut PrintFile,
    linecount: &mut usize,
    height: usize,
    events: &mut [Event],
    pmc: &Pmc,
) -> Result<(), Exit> {
    *linecount += 1;
    if *linecount > height {
        out.write_str("\n");
        *linecount = 1;
    }
    if *linecount == 1 {
        out.write_str(&header(events));
    }
    out.write_str("\n");
    out.write_str(&values(pmc, events)?);
    out.flush();
    Ok(())
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn measure(mut a: Args) -> Result<(), Exit> {
    let mut printfile = a.printfile.take().unwrap_or(PrintFile::Stderr);
    let live_out = printfile.try_clone()?;
    let print_live = move || live_out.boxed();
    let live = match a.top {
        true => None,
        false => {
            pmcstat_analysis::PrintedLogAnalysis::start(&a.analysis, a.verbosity, &print_live)?
        }
    };
    let pmc = library()?;
    // The log: the -O destination, or a pipe printed as it fills.
    let mut pipe_reader: Option<std::thread::JoinHandle<Result<(), Exit>>> = None;
    let mut log_fd: Option<RawFd> = None;
    if a.required & REQ_OUTPUT_LOGFILE != 0 {
        let fd = match &a.output_log {
            Some(path) => open_log(path, true)?,
            None => {
                let mut fds = [0; 2];
                // SAFETY: `fds` has room for the two descriptors.
                if unsafe { libc::pipe(fds.as_mut_ptr()) } < 0 {
                    return Err(err(EX_OSERR, "ERROR: pipe(2) failed", last_errno()));
                }
                // A thread prints the records as they come, so the log
                // writer never waits on a full pipe.
                let read_end = fds[0];
                let mut out = printfile.try_clone()?;
                if a.top {
                    // The top view reads the log as it comes and draws
                    // every -w seconds; `q` ends the run.
                    let view_args = TopArgs::of(&a);
                    let interval = Duration::from_secs_f64(a.interval);
                    pipe_reader = Some(std::thread::spawn(move || {
                        let mut top = view_args.top(out);
                        let quit = pmcstat_top::run(&mut top, read_end, interval, false)
                            .and_then(|quit| top.print_statistics().map(|()| quit));
                        // SAFETY: the read end is this thread's, closed once.
                        unsafe { libc::close(read_end) };
                        match quit {
                            Ok(true) => {
                                INTERRUPTED.store(true, Ordering::SeqCst);
                                Ok(())
                            }
                            Ok(false) => Ok(()),
                            Err(e) => Err(err(
                                EX_OSERR,
                                "ERROR: cannot display",
                                e.raw_os_error().unwrap_or(0),
                            )),
                        }
                    }));
                    a.do_print = true;
                    fds[1]
                } else {
                    pipe_reader = Some(std::thread::spawn(move || {
                        let mut parser = Parser::new(read_end);
                        let mut ev = PmclogEv::zeroed();
                        let r = loop {
                            match dump(&mut parser, &mut ev, &mut out) {
                                Ok(true) => break Ok(()),
                                Ok(false) => continue,
                                Err(e) => break Err(e),
                            }
                        };
                        out.flush();
                        // SAFETY: the read end is this thread's, closed once.
                        unsafe { libc::close(read_end) };
                        r
                    }));
                    a.do_print = true;
                    fds[1]
                }
            }
        };
        pmc.configure_logfile(fd)
            .map_err(|e| err(EX_OSERR, "ERROR: Cannot configure log file", e))?;
        log_fd = Some(fd);
    }
    for e in a.events.iter_mut() {
        let kind = if e.mode.is_system() {
            "system"
        } else {
            "process"
        };
        e.id = pmc
            .allocate(&e.spec, e.mode.raw(), e.flags, e.cpu as i32, e.count)
            .map_err(|er| {
                err(
                    EX_OSERR,
                    format!(
                        "ERROR: Cannot allocate {kind}-mode pmc with specification \"{}\"",
                        e.spec
                    ),
                    er,
                )
            })?;
        if e.mode.is_sampling() {
            pmc.set(e.id, e.count).map_err(|er| {
                err(
                    EX_OSERR,
                    format!("ERROR: Cannot set sampling count for PMC \"{}\"", e.name),
                    er,
                )
            })?;
        }
    }
    let notifier = match a.notify_every {
        Some(every) => Some(watch_notifications(pmc, &a.events, every)?),
        None => None,
    };
    set_widths(pmc, &mut a.events);
    let height = display_height(&printfile);
    let stats_before = pmc.driver_stats().ok();
    let procs = libpmcstat::process_control(pmc);
    // The command's process, created before the attach and held until
    // its PMCs run.
    let command = if a.command.is_empty() {
        None
    } else {
        let pid = procs
            .create_process(&a.command)
            .map_err(|e| err(EX_OSERR, e.message(&a.command[0]), e.errno()))?;
        a.targets.insert(0, pid);
        Some(pid)
    };
    if !a.target_patterns.is_empty() {
        let found = libpmcstat::find_targets(&*procs, &a.target_patterns)
            .map_err(|e| err(EX_OSERR, "ERROR: Cannot list the processes", e))?;
        for pid in found {
            if !a.targets.contains(&pid) {
                a.targets.push(pid);
            }
        }
        if a.targets.is_empty() {
            return Err(errx(EX_DATAERR, "ERROR: No matching target processes."));
        }
    }
    if a.has_target || command.is_some() {
        let process_pmcs = a
            .events
            .iter()
            .filter(|e| e.mode.is_virtual())
            .map(|e| (e.id, e.name.as_str()));
        libpmcstat::attach_pmcs(pmc, process_pmcs, &a.targets).map_err(|e| match e {
            libpmcstat::AttachError::Failed { errno, .. } => err(EX_OSERR, e.to_string(), errno),
            libpmcstat::AttachError::NoneAttached => errx(EX_DATAERR, e.to_string()),
        })?;
    }
    for e in &a.events {
        if let Err(er) = pmc.start(e.id) {
            eprintln!(
                "pmcstat: ERROR: Cannot start pmc {:#x} \"{}\": {}",
                e.id,
                e.name,
                strerror(er)
            );
            return Err(Exit {
                message: String::new(),
                code: EX_OSERR,
            });
        }
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    if let Some(pid) = command {
        procs
            .start_process(pid)
            .map_err(|e| err(EX_OSERR, e.message(&a.command[0]), e.errno()))?;
    }

    let print_counts = a.has_counting && a.required & REQ_OUTPUT_LOGFILE == 0;
    let mut linecount = 0usize;
    let mut elapsed = 0.0f64;
    loop {
        let step = match a.duration {
            Some(d) => a.interval.min(d - elapsed),
            None => a.interval,
        };
        // Wait in slices so that an interrupt or the command's exit ends
        // the run at once.
        let mut waited = 0.0f64;
        let mut command_done = false;
        while waited < step - 1e-9 && !INTERRUPTED.load(Ordering::SeqCst) {
            let slice = (step - waited).min(0.1);
            procs.wait(Duration::from_secs_f64(slice));
            waited += slice;
            if command.is_some_and(|pid| procs.exited(pid)) {
                command_done = true;
                break;
            }
        }
        elapsed += waited;
        // When the command exits, the counts are printed a last time and
        // the run ends.
        if command_done {
            if print_counts {
                print_line(&mut printfile, &mut linecount, height, &mut a.events, pmc)?;
            }
            break;
        }
        // FreeBSD prints nothing more after an interrupt, and interrupts
        // the command it started.
        if INTERRUPTED.load(Ordering::SeqCst) {
            if let Some(pid) = command {
                procs
                    .kill_process(pid)
                    .map_err(|e| err(EX_OSERR, "ERROR: cannot signal child process", e))?;
            }
            break;
        }
        if print_counts {
            print_line(&mut printfile, &mut linecount, height, &mut a.events, pmc)?;
        }
        // The top view redraws from what the driver has logged so far.
        if a.top {
            let _ = pmc.flush_logfile();
        }
        if a.duration.is_some_and(|d| elapsed >= d - 1e-9) {
            break;
        }
    }
    // No last newline after an interrupt, as FreeBSD's prints nothing
    // more then.
    if print_counts && !a.do_print && !INTERRUPTED.load(Ordering::SeqCst) {
        printfile.write_str("\n");
    }
    // Shut down: close the log (its last records reach the pipe), stop
    // and release every PMC.
    if log_fd.is_some() {
        pmc.close_logfile()
            .map_err(|e| err(EX_OSERR, "ERROR: logging failed", e))?;
    }
    if let Some(fd) = log_fd.filter(|_| pipe_reader.is_some()) {
        // SAFETY: our write end of the pipe, closed once.
        unsafe { libc::close(fd) };
    }
    if let Some(reader) = pipe_reader.take() {
        reader
            .join()
            .map_err(|_| errx(EX_OSERR, "ERROR: the log reader failed"))??;
    }
    for e in &a.events {
        pmc.stop(e.id).map_err(|er| {
            err(
                EX_OSERR,
                format!("ERROR: cannot stop pmc {:#x} \"{}\"", e.id, e.name),
                er,
            )
        })?;
        pmc.release(e.id).map_err(|er| {
            err(
                EX_OSERR,
                format!("ERROR: cannot release pmc {:#x} \"{}\"", e.id, e.name),
                er,
            )
        })?;
    }
    // The releases ended every notification descriptor.
    if let Some(t) = notifier {
        t.join()
            .map_err(|_| errx(EX_OSERR, "ERROR: the notification reader failed"))?;
    }
    printfile.flush();
    if let Some(live) = live {
        live.finish(&print_live)?;
    }
    if a.verbosity > 0 && (a.has_sampling || a.output_log.is_some()) {
        let after = pmc
            .driver_stats()
            .map_err(|e| err(EX_OSERR, "ERROR: Cannot retrieve driver statistics", e))?;
        if let Some(before) = stats_before {
            let stalls = after
                .pm_intr_bufferfull
                .wrapping_sub(before.pm_intr_bufferfull);
            if stalls > 0 {
                eprintln!(
                    "pmcstat: WARNING: sampling was paused at least {stalls} time{}.\nPlease consider tuning the \"kern.hwpmc.nsamples\" tunable.",
                    if stalls == 1 { "" } else { "s" }
                );
            }
            let dropped = after
                .pm_buffer_requests_failed
                .wrapping_sub(before.pm_buffer_requests_failed);
            if dropped > 0 {
                eprintln!(
                    "pmcstat: WARNING: at least {dropped} event{} were discarded while running.\nPlease consider tuning the \"kern.hwpmc.nbuffers_pcpu\" tunable.",
                    if dropped == 1 { "" } else { "s" }
                );
            }
        }
    }
    Ok(())
}

/// `-Q`: asks for a notification every `every` samples of each sampling
/// PMC, and starts a thread that prints a line on standard error for each
/// one (pmc_notify(3)) until every descriptor has ended.
fn watch_notifications(
    pmc: &Pmc,
    events: &[Event],
    every: u32,
) -> Result<std::thread::JoinHandle<()>, Exit> {
    let mut fds = Vec::new();
    for e in events.iter().filter(|e| e.mode.is_sampling()) {
        let fd = pmc.notify(e.id, 0, every, 0, 0).map_err(|er| {
            err(
                EX_OSERR,
                format!("ERROR: Cannot ask for notifications of pmc \"{}\"", e.name),
                er,
            )
        })?;
        fds.push(fd);
    }
    Ok(std::thread::spawn(move || print_notifications(fds)))
}

/// Prints the notification records of `fds` as they come, until each has
/// ended; closes them.
fn print_notifications(fds: Vec<RawFd>) {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while polled.iter().any(|p| p.fd >= 0) {
        // SAFETY: `polled` is an array of pollfd of its length.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
        if n < 0 {
            if last_errno() == libc::EINTR {
                continue;
            }
            break;
        }
        for p in polled.iter_mut().filter(|p| p.fd >= 0 && p.revents != 0) {
            let mut buf = [0u8; size_of::<uapi::pmc::PmcNotification>()];
            // SAFETY: reads at most the buffer's length into it.
            let got = unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) };
            let rec = <uapi::pmc::PmcNotification as uapi::Plain>::read_from(&buf);
            if let Some(rec) = rec.filter(|_| got == buf.len() as isize) {
                let end = if rec.pn_flags & uapi::pmc::PMC_NOTIFICATION_END != 0 {
                    " end"
                } else {
                    ""
                };
                eprintln!(
                    "pmcstat: notify pmc {:#x} cpu {} notifications {} samples {} dropped {}{end}",
                    rec.pn_pmcid, rec.pn_cpu, rec.pn_notifications, rec.pn_samples, rec.pn_dropped
                );
                continue;
            }
            // End of file (or an error): this PMC is done.
            // SAFETY: the descriptor is this thread's, closed once.
            unsafe { libc::close(p.fd) };
            p.fd = -1;
        }
    }
}

/// `-L` and `-u`: the PMU event table of this machine's CPU.
fn list_pmu(a: &Args) -> Result<(), Exit> {
    let table = (pmc::pmc_init() == 0)
        .then(|| pmc::library_handle().ok()?.pmu().copied())
        .flatten()
        .ok_or_else(|| {
            errx(
                EX_USAGE,
                "pmu features not supported on host or hwpmc not loaded",
            )
        })?;
    let mut out = std::io::stdout().lock();
    let r = if a.list_counters {
        table.print_counters(None, &mut out)
    } else {
        table.print_counter_desc(a.describe.as_deref().unwrap_or(""), &mut out)
    };
    match r.and_then(|()| out.flush()) {
        // A reader that stopped early (`| head`) is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(errx(EX_OSERR, format!("ERROR: cannot write the list: {e}")))
        }
        _ => Ok(()),
    }
}

fn run(argv: &[OsString]) -> Result<(), Exit> {
    let mut a = parse(argv)?;
    if a.list_counters || a.describe.is_some() {
        return list_pmu(&a);
    }
    if a.read_log.is_some() {
        return read_log(&mut a);
    }
    measure(a)
}

fn main() -> ExitCode {
    // As a C program: writing to a pipe whose reader is gone ends the
    // process (`pmcstat -R log | head`), where Rust's runtime would
    // ignore SIGPIPE and go on reading the whole log.
    // SAFETY: restores a signal's default disposition before any thread
    // starts; no handler is involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    match run(&argv) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}

//! hwt(8): traces a command's threads through hwt(4) and prints the
//! instructions they executed, decoded from the Intel PT trace with
//! libipt (or, with -r, saves the raw trace).
//!
//! Thread mode, FreeBSD's flow: the command is created held before its
//! exec; /dev/hwt allocates a thread-mode context for it; its first
//! thread's buffer is mapped; the configuration (user-mode branch
//! tracing) is set; tracing starts and the command runs. With -i/-f the
//! configuration asks for the pause after exec and mmap instead: at each
//! pause the records' images are loaded and the function looked up, and
//! once found its range is set, tracing starts and the command goes on. Records tell the images the process maps
//! (decoded against) and, one per filled page, where the unit is in its
//! ring: the new bytes are taken from the ring then. When more was
//! written since the last look than the ring holds, the oldest part is
//! lost: a warning says how much, and decoding resumes at the next PSB.
//!
//! CPU mode (-s): a context for a set of CPUs; its records name the
//! kernel and its modules, in which the function of -i/-f is looked up;
//! the units trace that function in kernel mode until SIGINT or SIGTERM,
//! and each CPU's trace is decoded (or saved) on its own.

mod hwt_dev;
mod hwt_pt;
mod hwt_record;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use libpmcstat::ProcessControl;
use pmctool::{Exit, Getopt, Opt, Program};

use hwt_dev::Kernel;

const PROG: Program = Program("hwt");
/// sysexits(3).
const EX_USAGE: u8 = 64;
const EX_DATAERR: u8 = 65;
const EX_SOFTWARE: u8 = 70;
/// The default buffer: 128 MiB.
const DEFAULT_BUFSIZE: usize = 128 << 20;
const PAGE_SIZE: usize = 4096;

/// What the command line asked for.
struct Options {
    bufsize: usize,
    backend: String,
    func: Option<String>,
    image: Option<String>,
    pid: Option<u32>,
    root: String,
    raw: bool,
    cpus: Option<Vec<u32>>,
    thread: Option<i32>,
    output: Option<String>,
    command: Vec<String>,
    style: hwt_pt::Style,
}

fn usage() -> Exit {
    eprintln!(
        "usage: hwt [-ghr] [-b bufsize] [-c devname] [-f name] [-i name] [-o format]\n\
         \x20          [-P pid] [-R fsroot] [-s cpuid] [-t tid] [-w path] [path [args ...]]"
    );
    Exit {
        message: String::new(),
        code: EX_USAGE,
    }
}

fn parse(args: &[OsString]) -> Result<Options, Exit> {
    let mut o = Options {
        bufsize: DEFAULT_BUFSIZE,
        backend: "pt".into(),
        func: None,
        image: None,
        pid: None,
        root: String::new(),
        raw: false,
        cpus: None,
        thread: None,
        output: None,
        command: Vec::new(),
        style: hwt_pt::Style {
            columns: None,
            json: false,
        },
    };
    // libxo's options come first (xo_parse_args): --libxo=STYLE or
    // --libxo STYLE; text and json styles.
    let mut args = args;
    while let Some(first) = args.first().map(|a| a.to_string_lossy().into_owned()) {
        let style = if let Some(v) = first.strip_prefix("--libxo=") {
            args = &args[1..];
            v.to_string()
        } else if first == "--libxo" {
            let v = args.get(1).map(|a| a.to_string_lossy().into_owned());
            args = &args[args.len().min(2)..];
            v.unwrap_or_default()
        } else {
            break;
        };
        let words: Vec<&str> = style.split(',').collect();
        if words.contains(&"json") {
            o.style.json = true;
        } else if words.contains(&"text") {
            o.style.json = false;
        } else {
            return Err(PROG.errx(
                EX_USAGE,
                format!("--libxo: unknown style \"{style}\": text or json"),
            ));
        }
    }
    let text = |v: Option<&std::ffi::OsStr>| {
        v.map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut g = Getopt::new(PROG, args, "P:R:gs:hc:b:rw:t:i:f:o:");
    while let Some(opt) = g.next_opt() {
        match opt {
            Opt::Opt(b'b', v) => {
                let s = text(v);
                o.bufsize = s
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n > 0 && n % PAGE_SIZE == 0 && n.is_power_of_two())
                    .ok_or_else(|| {
                        PROG.errx(
                            EX_USAGE,
                            format!("invalid buffer size \"{s}\": a power of two, a multiple of {PAGE_SIZE}"),
                        )
                    })?;
            }
            Opt::Opt(b'c', v) => o.backend = text(v),
            Opt::Opt(b'f', v) => o.func = Some(text(v)),
            Opt::Opt(b'i', v) => o.image = Some(text(v)),
            Opt::Opt(b'P', v) => {
                let s = text(v);
                o.pid = Some(
                    s.parse()
                        .map_err(|_| PROG.errx(EX_USAGE, format!("invalid pid \"{s}\"")))?,
                );
            }
            Opt::Opt(b'R', v) => o.root = text(v),
            Opt::Opt(b'r', _) => o.raw = true,
            Opt::Opt(b's', v) => o.cpus = Some(parse_cpus(&text(v))?),
            Opt::Opt(b't', v) => {
                let s = text(v);
                o.thread = Some(
                    s.parse()
                        .map_err(|_| PROG.errx(EX_USAGE, format!("invalid thread \"{s}\"")))?,
                );
            }
            Opt::Opt(b'w', v) => o.output = Some(text(v)),
            Opt::Opt(b'g', _) => {}
            Opt::Opt(b'o', v) => {
                let s = text(v);
                let cols: Option<Vec<hwt_pt::Column>> =
                    s.split(',').map(hwt_pt::Column::from_name).collect();
                o.style.columns = Some(cols.filter(|c| !c.is_empty()).ok_or_else(|| {
                    PROG.errx(
                        EX_USAGE,
                        format!("-o \"{s}\": columns are id, pc, offset, image and symbol"),
                    )
                })?);
            }
            _ => return Err(usage()),
        }
    }
    o.command = g
        .operands()
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if o.raw && o.output.is_none() {
        return Err(PROG.errx(1, "-r needs -w"));
    }
    if o.func.is_some() != o.image.is_some() {
        return Err(PROG.errx(EX_USAGE, "-i and -f go together"));
    }
    if o.cpus.is_some() {
        if o.thread.is_some() {
            return Err(PROG.errx(1, "-t chooses a thread: thread mode only, not with -s"));
        }
        if o.pid.is_some() {
            return Err(PROG.errx(EX_USAGE, "-s and -P: CPU mode traces CPUs, not a process"));
        }
        if !o.command.is_empty() {
            return Err(PROG.errx(EX_USAGE, "-s: CPU mode takes no command"));
        }
        if o.func.is_none() {
            return Err(PROG.errx(EX_USAGE, "-s: CPU mode needs -i and -f"));
        }
    }
    if o.backend != "pt" {
        return Err(PROG.errx(EX_USAGE, format!("unknown backend \"{}\"", o.backend)));
    }
    if o.cpus.is_none() && o.command.is_empty() == o.pid.is_none() {
        return Err(usage());
    }
    Ok(o)
}

/// The CPUs of -s: numbers separated by commas, blanks or tabs, in
/// increasing order, each once.
fn parse_cpus(list: &str) -> Result<Vec<u32>, Exit> {
    let mut cpus = Vec::new();
    for word in list.split([',', ' ', '\t']).filter(|w| !w.is_empty()) {
        let cpu = word
            .parse::<u32>()
            .ok()
            .filter(|&c| (c as usize) < hwt_record::CPUSET_SIZE * 8)
            .ok_or_else(|| {
                PROG.errx(
                    EX_USAGE,
                    format!(
                        "-s: invalid CPU \"{word}\": a number from 0 to {}",
                        hwt_record::CPUSET_SIZE * 8 - 1
                    ),
                )
            })?;
        cpus.push(cpu);
    }
    if cpus.is_empty() {
        return Err(PROG.errx(EX_USAGE, format!("-s: no CPU in \"{list}\"")));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.iter().any(|a| a == "-h") {
        return usage().report();
    }
    match parse(&args).and_then(|o| run(&o)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}

/// The kernel to talk to: the simulated machine when libpmc's transport
/// says so, else this one.
fn kernel() -> Result<Kernel, Exit> {
    #[cfg(feature = "sim")]
    if std::env::var("LIBPMC_TRANSPORT").as_deref() == Ok("sim") {
        let sim = pmc::libpmc_sim::SimTransport::from_environment()
            .map_err(|e| PROG.err(EX_SOFTWARE, "simulated machine", e))?;
        return Ok(Kernel::Sim(sim));
    }
    Ok(Kernel::Host)
}

/// The CPU the machine has, for libipt.
fn cpu(k: &Kernel) -> hwt_pt::Cpu {
    #[cfg(feature = "sim")]
    if let Kernel::Sim(sim) = k {
        use pmc::transport::Transport;
        if let Some(c) = sim
            .sysctl_string("kern.hwpmc.cpuid")
            .ok()
            .and_then(|s| hwt_pt::Cpu::from_key(&s))
        {
            return c;
        }
    }
    let _ = k;
    host_cpu()
}

#[cfg(target_arch = "x86_64")]
fn host_cpu() -> hwt_pt::Cpu {
    let r = std::arch::x86_64::__cpuid(1);
    let family = (r.eax >> 8) & 0xf;
    let model = (r.eax >> 4) & 0xf;
    let (family, model) = if family == 0xf || family == 6 {
        (
            family + ((r.eax >> 20) & 0xff),
            model | ((r.eax >> 12) & 0xf0),
        )
    } else {
        (family, model)
    };
    hwt_pt::Cpu {
        family: family as u16,
        model: model as u8,
        stepping: (r.eax & 0xf) as u8,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn host_cpu() -> hwt_pt::Cpu {
    hwt_pt::Cpu {
        family: 0,
        model: 0,
        stepping: 0,
    }
}

/// SIGINT or SIGTERM came (CPU mode's end).
static SIGNALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// SIGINT and SIGTERM set [`SIGNALLED`] (system calls restart).
fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to
        // an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn run(o: &Options) -> Result<(), Exit> {
    if let Some(cpus) = &o.cpus {
        return run_cpus(o, cpus);
    }
    let k = kernel()?;
    let procs: Box<dyn ProcessControl + '_> = match &k {
        #[cfg(feature = "sim")]
        Kernel::Sim(sim) => Box::new(libpmcstat::libpmcstat_sim::SimProcesses::new(sim)),
        Kernel::Host => Box::new(libpmcstat::libpmcstat_process::HostProcesses::new()),
    };
    let pid = match o.pid {
        Some(p) => p,
        None => procs.create_process(&o.command).map_err(|e| {
            PROG.errx(
                EX_SOFTWARE,
                format!("cannot create {}: {e:?}", o.command[0]),
            )
        })? as u32,
    };
    let mut session = hwt_record::Session::new(&k, pid, o)?;
    if o.pid.is_none() {
        procs
            .start_process(pid as libpmcstat::Pid)
            .map_err(|e| PROG.errx(EX_SOFTWARE, format!("cannot start {}: {e:?}", o.command[0])))?;
    }
    session.await_function(o, &|| procs.exited(pid as libpmcstat::Pid), &|| {
        procs.wait(std::time::Duration::from_millis(2))
    })?;
    loop {
        session.poll()?;
        if procs.exited(pid as libpmcstat::Pid) {
            break;
        }
        procs.wait(std::time::Duration::from_millis(10));
    }
    session.poll()?;
    session.finish();
    let mut out = output(o.output.as_deref())?;
    if o.raw {
        for t in &session.threads {
            out.write_all(&t.trace.concat())
                .map_err(|e| PROG.errx(1, format!("write: {e}")))?;
        }
        return Ok(());
    }
    let cpu = cpu(&k);
    let mut summary = hwt_pt::Summary::default();
    let werr = |e: std::io::Error| PROG.errx(1, format!("write: {e}"));
    hwt_pt::begin(&mut *out, &o.style).map_err(werr)?;
    for t in &session.threads {
        if o.thread.is_some_and(|want| want != t.id) {
            continue;
        }
        decode_trace(
            &mut *out,
            o,
            hwt_pt::Id::Thread(t.id),
            t,
            &session,
            cpu,
            &mut summary,
        )
        .map_err(werr)?;
    }
    hwt_pt::end(&mut *out, &o.style).map_err(werr)?;
    out.flush().map_err(werr)?;
    if summary.insns == 0 && session.filter.is_none() {
        return Err(PROG.errx(EX_DATAERR, "no instruction decoded"));
    }
    Ok(())
}

/// The decoded lines of the trace of thread or CPU `t` (each piece, the
/// pieces that a loss split it into, on its own).
fn decode_trace(
    out: &mut dyn Write,
    o: &Options,
    id: hwt_pt::Id,
    t: &hwt_record::Thread,
    session: &hwt_record::Session<'_>,
    cpu: hwt_pt::Cpu,
    summary: &mut hwt_pt::Summary,
) -> std::io::Result<()> {
    for piece in &t.trace {
        hwt_pt::decode_as(
            out,
            &o.style,
            id,
            piece,
            &session.images,
            cpu,
            session.filter,
            summary,
        )?;
    }
    Ok(())
}

/// The file `path`, or the standard output.
fn output(path: Option<&str>) -> Result<Box<dyn Write>, Exit> {
    Ok(match path {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| PROG.errx(1, format!("{path}: {e}")))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    })
}

/// How often CPU mode looks at the records and rings.
const CPU_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// CPU mode: traces `cpus` until SIGINT or SIGTERM, then decodes (or
/// saves) each CPU's trace: to `path<cpu>` with -w, else to the standard
/// output.
fn run_cpus(o: &Options, cpus: &[u32]) -> Result<(), Exit> {
    catch_signals();
    let k = kernel()?;
    let mut session = hwt_record::Session::cpus(&k, cpus, o)?;
    while !SIGNALLED.load(std::sync::atomic::Ordering::Relaxed) {
        session.poll()?;
        k.pause(CPU_POLL);
    }
    session.stop()?;
    session.poll()?;
    session.finish();
    let werr = |e: std::io::Error| PROG.errx(1, format!("write: {e}"));
    if o.raw {
        // -r needs -w.
        let path = o.output.as_deref().unwrap_or_default();
        for t in &session.threads {
            let mut out = output(Some(&format!("{path}{}", t.id)))?;
            out.write_all(&t.trace.concat()).map_err(werr)?;
            out.flush().map_err(werr)?;
        }
        return Ok(());
    }
    let cpu = cpu(&k);
    let decode = |out: &mut dyn Write, t: &hwt_record::Thread, summary: &mut hwt_pt::Summary| {
        decode_trace(out, o, hwt_pt::Id::Cpu(t.id), t, &session, cpu, summary)
    };
    match &o.output {
        // A file, a document, for each CPU.
        Some(path) => {
            for t in &session.threads {
                let mut out = output(Some(&format!("{path}{}", t.id)))?;
                let mut summary = hwt_pt::Summary::default();
                hwt_pt::begin(&mut *out, &o.style).map_err(werr)?;
                decode(&mut *out, t, &mut summary).map_err(werr)?;
                hwt_pt::end(&mut *out, &o.style).map_err(werr)?;
                out.flush().map_err(werr)?;
            }
        }
        // The CPUs one after the other.
        None => {
            let mut out = output(None)?;
            let mut summary = hwt_pt::Summary::default();
            hwt_pt::begin(&mut *out, &o.style).map_err(werr)?;
            for t in &session.threads {
                decode(&mut *out, t, &mut summary).map_err(werr)?;
            }
            hwt_pt::end(&mut *out, &o.style).map_err(werr)?;
            out.flush().map_err(werr)?;
        }
    }
    // Decoding no instruction is no error here: the function may not
    // have run.
    Ok(())
}

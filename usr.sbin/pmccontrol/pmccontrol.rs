//! pmccontrol(8): lists the PMC classes and their events (-L), the rows of
//! every CPU (-l), the driver's statistics (-s), and enables or disables
//! rows (-e, -d, per CPU with -c). Options, messages, output and exit
//! codes are FreeBSD's.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use pmc::pmc::Pmc;
use uapi::pmc::{PmcClass, PmcCputype, PmcDisp, PmcMode, PmcState, c_field_str};

use pmctool::sysexits::{EX_CONFIG, EX_DATAERR, EX_OSERR, EX_UNAVAILABLE, EX_USAGE};
use pmctool::{Exit, Getopt, Opt, Program};

const PROGRAM: Program = Program("pmccontrol");

const USAGE: &str = "Usage:\n       pmccontrol -L\n       pmccontrol -l\n       pmccontrol -s\n       pmccontrol [-e pmc | -d pmc | -c cpu] ...";

fn errx(code: u8, msg: impl AsRef<str>) -> Exit {
    PROGRAM.errx(code, msg)
}

fn err(code: u8, msg: impl AsRef<str>, errno: i32) -> Exit {
    PROGRAM.err(code, msg, errno)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Usage,
    ListEvents,
    ListState,
    EnableDisable,
    Statistics,
}

/// One -e or -d: CPU (None for all), row (None for all), enable or not.
#[derive(Debug, Clone, Copy)]
struct Op {
    cpu: Option<u32>,
    row: Option<u32>,
    enable: bool,
}

/// A CPU or row number as FreeBSD's pmccontrol reads it: strtoul(3) with
/// base 0 over the whole argument (leading blanks and a sign allowed, an
/// empty one being 0), stored in an int, which must not be negative.
fn parse_number(s: &OsStr) -> Option<u32> {
    let (value, used) = pmctool::strtoul(s.as_bytes())?;
    if used != s.len() {
        return None;
    }
    // C's conversion of the unsigned long to int keeps the low 32 bits.
    u32::try_from(value as i32).ok()
}

fn parse(args: &[OsString]) -> Result<(Command, Vec<Op>), Exit> {
    let mut command = Command::Usage;
    let mut cpu: Option<u32> = None;
    let mut ops = Vec::new();
    let mut conflict = false;
    let mut opts = Getopt::new(PROGRAM, args, ":c:d:e:lLs");
    while let Some(opt) = opts.next_opt() {
        match opt {
            Opt::Opt(c @ (b'L' | b'l' | b's'), _) => {
                if command != Command::Usage {
                    conflict = true;
                } else {
                    command = match c {
                        b'L' => Command::ListEvents,
                        b'l' => Command::ListState,
                        _ => Command::Statistics,
                    };
                }
            }
            Opt::Opt(c @ (b'c' | b'd' | b'e'), Some(v)) => {
                if command != Command::Usage && command != Command::EnableDisable {
                    conflict = true;
                    continue;
                }
                command = Command::EnableDisable;
                // "*" (or anything starting with it) is every CPU or row.
                let n = if v.as_bytes().starts_with(b"*") {
                    None
                } else {
                    let n = parse_number(v);
                    Some(n.ok_or_else(|| {
                        let what = if c == b'c' { "CPU" } else { "PMC" };
                        errx(
                            EX_DATAERR,
                            format!("\"{}\" is not a valid {what} id", pmctool::quoted(v)),
                        )
                    })?)
                };
                if c == b'c' {
                    cpu = n;
                } else {
                    ops.push(Op {
                        cpu,
                        row: n,
                        enable: c == b'e',
                    });
                }
            }
            Opt::MissingArgument(c) => {
                return Err(errx(
                    EX_USAGE,
                    format!("Missing argument to option '-{}'", pmctool::shown(c)),
                ));
            }
            Opt::Unknown(c) | Opt::Opt(c, _) => {
                PROGRAM.warnx(format!("Unrecognized option \"-{}\"", pmctool::shown(c)));
                return Err(errx(EX_USAGE, USAGE));
            }
        }
    }
    if command == Command::Usage {
        return Err(errx(EX_USAGE, USAGE));
    }
    if conflict {
        return Err(Exit {
            message: String::new(),
            code: EX_USAGE,
        });
    }
    Ok((command, ops))
}

fn list_events(pmc: &Pmc, out: &mut impl Write) -> Result<(), Exit> {
    // A CPU with a PMU event table: its events, one a line after a tab,
    // and nothing else (pmc_pmu_print_counters), as FreeBSD's does.
    if let Some(table) = pmc.pmu() {
        let _ = table.print_counters(None, out);
        return Ok(());
    }
    // Otherwise each class of the machine and the events of libpmc's
    // table for it (pmc_event_names_of_class).
    let ci = pmc.cpuinfo();
    for c in &ci.pm_classes[..ci.pm_nclass as usize] {
        let class = PmcClass::from_raw(c.pm_class);
        let name = class.map_or("", PmcClass::name);
        let _ = writeln!(out, "{name}");
        let events = class
            .ok_or(libc::EINVAL)
            .and_then(|cl| pmc.events_of_class(cl))
            .map_err(|e| {
                err(
                    EX_OSERR,
                    format!("ERROR: Cannot find information for event class \"{name}\""),
                    e,
                )
            })?;
        for e in events {
            let _ = writeln!(out, "\t{}", e.name.to_string_lossy());
        }
    }
    Ok(())
}

fn list_state(pmc: &Pmc, out: &mut impl Write) -> Result<(), Exit> {
    let ci = pmc.cpuinfo();
    let cputype = PmcCputype::from_raw(ci.pm_cputype).map_or("", PmcCputype::name);
    let _ = writeln!(
        out,
        "{} {} CPUs present, with {} PMCs per CPU",
        ci.pm_ncpu, cputype, ci.pm_npmc
    );
    let mut shown = 0;
    for cpu in 0..ci.pm_ncpu {
        let rows = match pmc.pmcinfo(cpu as i32) {
            Ok(rows) => rows,
            // An absent or halted CPU.
            Err(libc::ENXIO) => continue,
            Err(e) => {
                return Err(err(
                    EX_OSERR,
                    format!("Unable to get PMC status for CPU {cpu}"),
                    e,
                ));
            }
        };
        let _ = writeln!(out, "#CPU {shown}:");
        shown += 1;
        let _ = writeln!(out, "#N  NAME             CLASS  STATE    ROW-DISP");
        for (n, row) in rows.iter().enumerate() {
            let name = String::from_utf8_lossy(c_field_str(&row.pm_name));
            let class = PmcClass::from_raw(row.pm_class).map_or("", PmcClass::name);
            let state = if row.pm_enabled != 0 {
                "ENABLED"
            } else {
                "DISABLED"
            };
            let disp = PmcDisp::from_raw(row.pm_rowdisp).map_or("", PmcDisp::name);
            let _ = write!(out, " {n:<2} {name:<16} {class:<6} {state:<8} {disp:<10}");
            if row.pm_ownerpid != -1 {
                let _ = write!(out, " (pid {})", row.pm_ownerpid);
                // printf's "(null)" for an event libpmc cannot name (one
                // of a PMU table is allocated by its index there).
                let event = pmc.event_name(row.pm_event).unwrap_or("(null)");
                let _ = write!(out, " {event:<32}");
                if PmcMode::from_raw(row.pm_mode).is_some_and(PmcMode::is_sampling) {
                    let _ = write!(out, " (reload count {})", row.pm_reloadcount as i64);
                }
            }
            let _ = writeln!(out);
        }
    }
    Ok(())
}

fn statistics(pmc: &Pmc, out: &mut impl Write) -> Result<(), Exit> {
    let s = pmc
        .driver_stats()
        .map_err(|e| err(EX_OSERR, "ERROR: cannot retrieve driver statistics", e))?;
    for (label, value) in [
        ("interrupts processed:", s.pm_intr_processed),
        ("non-PMC interrupts:", s.pm_intr_ignored),
        (
            "sampling stalls due to space shortages:",
            s.pm_intr_bufferfull,
        ),
        ("system calls:", s.pm_syscalls),
        ("system calls with errors:", s.pm_syscall_errors),
        ("buffer requests:", s.pm_buffer_requests),
        ("buffer requests failed:", s.pm_buffer_requests_failed),
        ("sampling log sweeps:", s.pm_log_sweeps),
    ] {
        // FreeBSD prints the unsigned counters with %d.
        let _ = writeln!(out, "{label:<40} {}", value as i32);
    }
    Ok(())
}

fn enable_disable(pmc: &Pmc, ops: &[Op]) -> Result<(), Exit> {
    if ops.is_empty() {
        return Err(errx(EX_USAGE, "No PMCs specified to enable or disable"));
    }
    let ncpu = pmc.cpuinfo().pm_ncpu;
    let npmc = pmc.cpuinfo().pm_npmc;
    if npmc == 0 {
        return Err(errx(EX_CONFIG, "No PMCs found"));
    }
    // CPUs that answer are the active ones; "all CPUs" means those.
    let active: Vec<bool> = (0..ncpu).map(|c| pmc.pmcinfo(c as i32).is_ok()).collect();
    // Later options override earlier ones for the same CPU and row.
    let mut map: Vec<Option<bool>> = vec![None; (ncpu * npmc) as usize];
    for op in ops {
        if let Some(c) = op.cpu.filter(|&c| c >= ncpu) {
            return Err(errx(EX_DATAERR, format!("CPU id too large: \"{c}\"")));
        }
        if let Some(r) = op.row.filter(|&r| r >= npmc) {
            return Err(errx(EX_DATAERR, format!("PMC id too large: \"{r}\"")));
        }
        let cpus: Vec<u32> = match op.cpu {
            Some(c) => vec![c],
            None => (0..ncpu).filter(|&c| active[c as usize]).collect(),
        };
        for c in cpus {
            let rows: Vec<u32> = op.row.map_or_else(|| (0..npmc).collect(), |r| vec![r]);
            for r in rows {
                map[(c * npmc + r) as usize] = Some(op.enable);
            }
        }
    }
    for c in 0..ncpu {
        for r in 0..npmc {
            let Some(enable) = map[(c * npmc + r) as usize] else {
                continue;
            };
            let state = if enable {
                PmcState::Free
            } else {
                PmcState::Disabled
            };
            pmc.admin(c as i32, r as i32, state).map_err(|e| {
                let what = if enable { "Enable" } else { "Disable" };
                err(EX_OSERR, format!("{what} of PMC {r} on CPU {c} failed"), e)
            })?;
        }
    }
    Ok(())
}

fn run(args: &[OsString]) -> Result<(), Exit> {
    let (command, ops) = parse(args)?;
    if pmc::pmc_init() < 0 {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        return Err(err(
            EX_UNAVAILABLE,
            "Initialization of the pmc(3) library failed",
            errno,
        ));
    }
    let pmc = pmc::library_handle().map_err(|e| {
        err(
            EX_UNAVAILABLE,
            "Initialization of the pmc(3) library failed",
            e,
        )
    })?;
    let mut out = std::io::stdout().lock();
    match command {
        Command::ListEvents => list_events(pmc, &mut out),
        Command::ListState => list_state(pmc, &mut out),
        Command::Statistics => statistics(pmc, &mut out),
        Command::EnableDisable => enable_disable(pmc, &ops),
        Command::Usage => unreachable!("handled by parse"),
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}
